-- limit_block.lua: note that the parked head of a name waits for this
-- listed limit, so that a release of the limit wakes the name
-- (limit_wake.lua); unless the limit has room for that head now and no
-- name is queued or noted before it (a slot came back before this call:
-- the caller wakes the name itself instead).
-- KEYS: the seven keys of includes/lease_set_keys.lua (the listed limit's),
-- and KEYS[8] blocked, and KEYS[9] limits, and KEYS[10] turns:
--   blocked  ZSET  <prefix>:{<limit name>}:blocked: name whose head waits ->
--                  its place (includes/place_in_blocked.lua: Redis time in
--                  us of its note, less 10^16 for a name new to the round)
--   limits   HASH  <prefix>:{<limit name>}:blocked:limits: name -> "<asks>
--                  <holds>": the limit its head asks of this limit, as
--                  passed (limit_of(): an override applies), and ARGV[5]
--                  (" w" after them: noted again by a wake-up, wake_first());
--   turns    ZSET  <prefix>:{<limit name>}:blocked:turns: name that had a
--                  turn of this limit and left the set -> when (us), written
--                  by wake_first() and limit_forget.lua
--                  (includes/record_turn.lua), read and pruned here
--                  (includes/place_in_blocked.lua);
--                  the three keys live ARGV[3] ms after the last note
-- ARGV[1] the name whose head waits
-- ARGV[2] its limit of this listed limit
-- ARGV[3] ttl_ms
-- ARGV[4] in_flight  slots of the limit to count as taken besides its
--                    holders: tasks just promoted for slots that came back,
--                    which have not taken them yet
-- ARGV[5] holds      1 if the name's other parked tasks are to stay held for
--                    this limit when it is woken (the limit's name is the
--                    same for every call of the name's task), else 0
-- ARGV[6] turn       the name's turn of this limit, for its place
--                    (includes/place_in_blocked.lua): 0 none; -1 it was
--                    just woken and promoted; else the Redis time (us) a
--                    run of it handed its slot on (limit_release.lua's
--                    reply): it made way
-- Returns 1 if noted (or noted already: it keeps its place), 0 if not
-- noted because the limit has room for the head now.  Where it is noted:
-- includes/place_in_blocked.lua.

--- @include "includes/admissible"
--- @include "includes/holder_state"
--- @include "includes/lease_set_keys"
--- @include "includes/limit_of"
--- @include "includes/place_in_blocked"
--- @include "includes/purge_expired_holders"

local BLOCKED, LIMITS, TURNS = KEYS[8], KEYS[9], KEYS[10]
local name, asks, ttl_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('EXISTS', QUEUE, BLOCKED) == 0 then
  purge_expired_holders()
  local state = holder_state()
  state.n = state.n + tonumber(ARGV[4])
  if admissible(state, limit_of(asks)) then return 0 end
end
if not redis.call('ZSCORE', BLOCKED, name) then
  redis.call('ZADD', BLOCKED, place_in_blocked(BLOCKED, TURNS, name, tonumber(ARGV[6])), name)
end
redis.call('HSET', LIMITS, name, asks .. ' ' .. ARGV[5])
redis.call('PEXPIRE', BLOCKED, ttl_ms)
redis.call('PEXPIRE', LIMITS, ttl_ms)
redis.call('PEXPIRE', TURNS, ttl_ms)
return 1
