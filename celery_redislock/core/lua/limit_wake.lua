-- limit_wake.lua: take the oldest name whose parked head waits for this
-- listed limit (limit_block.lua) out of its blocked set, if its head would
-- be admitted now, for the caller to wake (park_unhold.lua).
-- KEYS: the seven keys of includes/lease_set_keys.lua (the listed limit's),
-- and KEYS[8] blocked (limit_block.lua's KEYS[1]), and KEYS[9] limits (its KEYS[2]).
-- ARGV[1] limit  the releasing run's limit of this listed limit, as passed
--                (limit_of(): an override applies); 0 when not known
-- Returns {name, room}: name the oldest noted name, woken, or "" when none
-- is: the set is empty, a blocking waiter is queued on the limit (it is
-- handed the slot, and a newcomer may not pass it: acquire.lua), or the
-- oldest head is not admissible by its own limit beside the current holders
-- (THE INVARIANT), so that a woken head is admitted when it tries unless
-- another run takes the slot first; FIFO: the oldest waits for a slot its
-- limit admits, the others behind it.  room: when nobody is noted or
-- queued, the slots of ARGV[1] free beside the holders (the releasing run's
-- name may promote that many of its parked work: park_release.lua), else 0.

--- @include "includes/admissible"
--- @include "includes/holder_state"
--- @include "includes/lease_set_keys"
--- @include "includes/limit_of"
--- @include "includes/purge_expired_holders"

local BLOCKED, LIMITS = KEYS[8], KEYS[9]
if redis.call('EXISTS', QUEUE) == 1 then return {'', 0} end
local oldest = redis.call('ZRANGE', BLOCKED, 0, 0)[1]
purge_expired_holders()
if not oldest then
  local raw = tonumber(ARGV[1])
  if raw == 0 then return {'', 0} end
  return {'', math.max(limit_of(raw) - holder_state().n, 0)}
end
local raw = tonumber(redis.call('HGET', LIMITS, oldest) or '1')
if not admissible(holder_state(), limit_of(raw)) then return {'', 0} end
redis.call('ZREM', BLOCKED, oldest)
redis.call('HDEL', LIMITS, oldest)
return {oldest, 0}
