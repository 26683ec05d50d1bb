--- @include "includes/lease_set_keys"
--- @include "includes/now"
--- @include "includes/remove_members"

-- Drop holders whose lease expired by Redis time; returns how many.
-- (The LIMIT_FIELD bound stays valid: fewer holders can only raise the minimum.)
-- Once per script call: NOW_MS does not move and every holder added since
-- expires after it, so a second look would find nothing.
local purged
--- @per_call begin
purged = false
--- @per_call end
local function purge_expired_holders()
  if purged then return 0 end
  purged = true
  local dead = redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', NOW_MS)
  if #dead > 0 then remove_members(HOLDERS, INFO, dead) end
  return #dead
end
