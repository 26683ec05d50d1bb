-- park_release.lua: a park-policy holder gives its slot back, and the freed
-- slots go to waiters (see release_owner() in includes/release_owner.lua) and then to the
-- parked tasks, as park_promote.lua would fill them: one round trip from
-- the end of a task to the next task's publish.
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server).
-- ARGV[1] name
-- ARGV[2] owner
-- ARGV[3] wake_ms      as release.lua's ARGV[2]
-- ARGV[4] limit        the caller's limit, for the name's due time and as the
--                      limit stored (0: the one last stored); each parked task
--                      is admitted by its own limit
-- ARGV[5] deadline_ms  reservation deadline
-- ARGV[6] max          most promotions in this call (bounds the reply)
-- ARGV[7] task         the releasing run's task name
-- ARGV[8] max_publishes  as park_promote.lua's ARGV[6]
-- ARGV[9] hold_ms      0, or: the run makes way for the names waiting for the
--                      listed limit ARGV[10], which it gave to one of them:
--                      its name's parked work is held for that limit this long
--                      (as park_hold.lua) before anything is promoted, and the
--                      caller notes the name behind them (limit_block.lua)
-- ARGV[10] waits_for   that listed limit ("" with ARGV[9] 0)
-- ARGV[11] guard       "0": the caller's states reach nobody (no result
--                      backend, no events), so no state guard is taken; else
--                      the first task promoted gets its state guard (its
--                      caller writes its PROMOTED, includes/promote_parked.lua)
-- Returns {due, held, held_for, kind, id, token, envelope, guard, ...}: held as
-- release.lua's reply; held_for 1 if the parked work is now held for
-- ARGV[10]; the rest as park_promote.lua's; due -2 when nothing was parked or
-- in flight before this call (so the name has no index entry to update: on
-- a Cluster, core/park.py NOTHING_BEFORE).

--- @include "includes/hold_for_limit"
--- @include "includes/next_due"
--- @include "includes/park_keys"
--- @include "includes/promote_parked"
--- @include "includes/release_owner"
--- @include "includes/stored_limit"

local held = release_owner(ARGV[2], tonumber(ARGV[3]))
local pending = redis.call('EXISTS', PARK, INFLIGHT) > 0
if not pending then
  -- Nothing parked or in flight: the previous script already left no index
  -- entry and no PMETA (see next_due()), so there is nothing to update.
  return {-2, held, 0}
end
local held_for = 0
if tonumber(ARGV[9]) > 0 then held_for = hold_for_limit(ARGV[10], tonumber(ARGV[9])) end
local limit = stored_limit(tonumber(ARGV[4]))
local out = {0, held, held_for}
if held_for == 1 then
  -- The hold stops the head, so there is nothing to promote; an expired
  -- head or an overdue reservation is dealt with by the wake-up that lifts
  -- the hold (or the sweeper at its end), as under any hold.
  out[1] = next_due(limit, nil, true)
  return out
end
local state, parked = promote_parked(limit, tonumber(ARGV[5]), tonumber(ARGV[6]), out, ARGV[7],
  tonumber(ARGV[8]), ARGV[11] ~= '0')
out[1] = next_due(limit, state.n, parked)
return out
