-- state_hold.lua: take the right to write one task's state to the result
-- backend, if the decision behind that state still holds (parking/states.py).
-- Every state the library writes for a task of a parked name is written by
-- the holder of this guard, so a state decided earlier (PARKED) can never
-- land after one decided later (SUPERSEDED, PROMOTED, REVOKED) and hide it.
-- A park script that parks or promotes a task takes the same guard itself
-- (includes/hold_state_guard.lua); this script serves every other write.
-- Standalone (no includes).  The keys share the name's hash tag.
-- KEYS[1] guard     STRING  <prefix>:{<name>}:state:<task id> -> holder
-- KEYS[2] parked    HASH    the name's parked entries (includes/park_keys.lua's KEYS[9])
-- KEYS[3] inflight  HASH    its promotions in flight (KEYS[10])
-- ARGV[1] task_id
-- ARGV[2] holder    a random id of this write
-- ARGV[3] ttl_ms    how long the guard outlives a holder that died mid-write
-- ARGV[4] needs     "parked": write only while the task is parked;
--                   "inflight": only while it is promoted and not yet claimed;
--                   "": always (a final state)
-- Returns 1: held, write; 0: another write holds it, try again shortly;
-- -1: the decision no longer holds, do not write (nothing is held).

if redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', tonumber(ARGV[3])) == false then
  return 0
end
local needs = ARGV[4]
if (needs == 'parked' and redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0)
    or (needs == 'inflight' and redis.call('HEXISTS', KEYS[3], ARGV[1]) == 0) then
  redis.call('DEL', KEYS[1])
  return -1
end
return 1
