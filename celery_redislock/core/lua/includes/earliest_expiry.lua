--- @include "includes/lease_set_keys"

-- Absolute expiry (ms) of the earliest-expiring holder, or nil.
local function earliest_expiry()
  local first = redis.call('ZRANGE', HOLDERS, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) end
  return nil
end
