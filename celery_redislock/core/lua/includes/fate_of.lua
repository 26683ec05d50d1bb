--- @include "includes/now"
--- @include "includes/park_keys"

-- 'stale', 'claimed' or 'unknown'
local function fate_of(id, token)
  for fate, what in pairs({s = 'stale', c = 'claimed'}) do
    local until_ms = redis.call('ZSCORE', TOKENS, fate .. '|' .. id .. '|' .. token)
    if until_ms and tonumber(until_ms) > NOW_MS then return what end
  end
  return 'unknown'
end
