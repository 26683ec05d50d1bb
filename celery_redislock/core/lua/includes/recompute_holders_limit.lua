--- @include "includes/entry_limit"
--- @include "includes/lease_set_keys"

-- Exact minimum of the current holders' limits, stored in LIMIT_FIELD.
local function recompute_holders_limit()
  local owners = redis.call('ZRANGE', HOLDERS, 0, -1)
  local low = math.huge
  for i = 1, #owners, 1000 do
    local chunk = {}
    for j = i, math.min(i + 999, #owners) do chunk[#chunk + 1] = owners[j] end
    local infos = redis.call('HMGET', INFO, unpack(chunk))
    for k = 1, #chunk do low = math.min(low, entry_limit(infos[k])) end
  end
  if low < math.huge then redis.call('HSET', INFO, LIMIT_FIELD, low) end
  return low
end
