-- The run-time override of a name, its HASH `key` (override.lua writes it;
-- no TTL): limit (0: none), interval_us and burst (nil: none).  One HMGET,
-- once per script call and key, when first needed, so a script that resolves
-- both a limit (limit_of.lua) and a rate (rate_terms.lua) reads it once.
local overrides
--- @per_call begin
overrides = {}
--- @per_call end
local function override_of(key)
  local o = overrides[key]
  if o == nil then
    local raw = redis.call('HMGET', key, 'limit', 'interval_us', 'burst')
    o = {limit = tonumber(raw[1] or '0'), interval = tonumber(raw[2] or ''),
      burst = tonumber(raw[3] or '')}
    overrides[key] = o
  end
  return o
end
