-- limit_wake.lua: take the oldest name whose parked head waits for this
-- listed limit (limit_block.lua) out of its blocked set, if its head would
-- be admitted now, for the caller to wake (park_unhold.lua).  A name noted
-- with holds 1 is noted again at once, behind the others: its caller
-- promotes one of its tasks and holds the rest for the limit again, so the
-- next release that reaches it promotes one more (the caller takes the
-- note back with limit_forget.lua when nothing is held again).
-- KEYS: the seven keys of includes/lease_set_keys.lua (the listed limit's),
-- and KEYS[8] blocked (limit_block.lua's KEYS[1]), and KEYS[9] limits (its KEYS[2]).
-- ARGV[1] the name not to wake ("" none): a run that gives this limit back
--         because another refused it, whose own name goes back to wait
-- ARGV[2] in_flight  slots of the limit to count as taken besides its
--                    holders (tasks the caller promoted for it already)
-- ARGV[3] ttl_ms     as limit_block.lua's ARGV[3], for a name noted again
-- Returns {name, asks, holds, room} or {}: name, asks and holds as noted by
-- limit_block.lua; room 1 if the limit would admit that head once more after
-- this wake-up (the caller wakes again); none when the set is empty, when a
-- blocking waiter is queued on the limit (it is handed the slot, and a
-- newcomer may not pass it: acquire.lua), or when the oldest head is not
-- admissible by its own limit beside the current holders (THE INVARIANT),
-- so that a woken head is admitted when it tries unless another run takes
-- the slot first; FIFO: the oldest waits for a slot its limit admits, the
-- others behind it.

--- @include "includes/admissible"
--- @include "includes/holder_state"
--- @include "includes/lease_set_keys"
--- @include "includes/limit_of"
--- @include "includes/now"
--- @include "includes/purge_expired_holders"

local BLOCKED, LIMITS = KEYS[8], KEYS[9]
local first_two = redis.call('ZRANGE', BLOCKED, 0, 1)
local oldest = first_two[1]
if oldest == ARGV[1] then oldest = first_two[2] end
if not oldest then return {} end
if redis.call('EXISTS', QUEUE) == 1 then return {} end
purge_expired_holders()
local noted = redis.call('HGET', LIMITS, oldest) or '1 0'
local raw, holds = string.match(noted, '^(%-?%d+) ?(%d?)$')
raw, holds = tonumber(raw or '1'), tonumber(holds) or 0
local state = holder_state()
state.n = state.n + tonumber(ARGV[2])
local limit = limit_of(raw)
if not admissible(state, limit) then return {} end
if holds == 1 then
  redis.call('ZADD', BLOCKED, NOW_MS, oldest)  -- to the back
  redis.call('PEXPIRE', BLOCKED, ARGV[3])
  redis.call('PEXPIRE', LIMITS, ARGV[3])
else
  redis.call('ZREM', BLOCKED, oldest)
  redis.call('HDEL', LIMITS, oldest)
end
state.n = state.n + 1
local room = 0
if admissible(state, limit) then room = 1 end
return {oldest, raw, holds, room}
