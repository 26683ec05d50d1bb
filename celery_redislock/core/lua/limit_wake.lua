-- limit_wake.lua: if this listed limit has a free slot, take the names
-- whose parked heads wait for it (limit_block.lua) out of its blocked set,
-- oldest first, for the caller to wake (park_unhold.lua on each).
-- KEYS: the seven keys of includes/lease_set_keys.lua (the listed limit's),
-- and KEYS[8] blocked (limit_block.lua's KEYS[1]).
-- ARGV[1] max   most names to take
-- Returns the names taken: none when the set is empty or no slot is free
-- by the current holders' limits (THE INVARIANT; a waiting run is admitted
-- by its own limit when it tries, and noted again if that refuses it).

--- @include "includes/admissible"
--- @include "includes/holder_state"
--- @include "includes/purge_expired_holders"

local BLOCKED = KEYS[8]
if redis.call('EXISTS', BLOCKED) == 0 then return {} end
purge_expired_holders()
if not admissible(holder_state(), math.huge) then return {} end
local out = {}
for i, member in ipairs(redis.call('ZPOPMIN', BLOCKED, tonumber(ARGV[1]))) do
  if i % 2 == 1 then out[#out + 1] = member end
end
return out
