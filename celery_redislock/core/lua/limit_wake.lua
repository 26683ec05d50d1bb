-- limit_wake.lua: take the oldest name whose parked head waits for this
-- listed limit (limit_block.lua) out of its blocked set, if its head would
-- be admitted now, for the caller to wake (park_unhold.lua).
-- KEYS: the seven keys of includes/lease_set_keys.lua (the listed limit's),
-- and KEYS[8] blocked (limit_block.lua's KEYS[1]), and KEYS[9] limits (its KEYS[2]).
-- ARGV[1] the name not to wake ("" none): a run that gives this limit back
--         because another refused it, whose own name goes back to wait
-- Returns {name, asks, holds} (as noted by limit_block.lua) or {}: none
-- when the set is empty, when a blocking waiter is queued on the limit (it
-- is handed the slot, and a newcomer may not pass it: acquire.lua), or when
-- the oldest head is not admissible by its own limit beside the current
-- holders (THE INVARIANT), so that a woken head is admitted when it tries
-- unless another run takes the slot first; FIFO: the oldest waits for a
-- slot its limit admits, the others behind it.

--- @include "includes/admissible"
--- @include "includes/holder_state"
--- @include "includes/lease_set_keys"
--- @include "includes/limit_of"
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
raw = tonumber(raw or '1')
if not admissible(holder_state(), limit_of(raw)) then return {} end
redis.call('ZREM', BLOCKED, oldest)
redis.call('HDEL', LIMITS, oldest)
return {oldest, raw, tonumber(holds) or 0}
