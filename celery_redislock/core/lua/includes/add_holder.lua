--- @include "includes/index_held"
--- @include "includes/lease_set_keys"
--- @include "includes/limit_of"
--- @include "includes/next_token"
--- @include "includes/now"
--- @include "includes/outlive_grants"
--- @include "includes/recompute_holders_limit"

-- Make `owner` a holder with its limit as passed (`raw`, stored so that an
-- override applies to it later; the caller checked admissible(state,
-- limit_of(raw))).  Its caller makes the holder keys outlive it
-- (outlive_grants(), or fit_holder_ttl()).  `indexed_until` (optional): a
-- time until which HELD lists the name already (a claim's reservation, whose
-- deadline index_held() recorded): no need to list it again for a lease
-- that ends before.
local function add_holder(state, owner, ttl_ms, raw, meta, indexed_until)
  local token = next_token()
  local bound = limit_of(raw)
  if state.n > 0 then bound = math.min(state.bound or recompute_holders_limit(), bound) end
  redis.call('ZADD', HOLDERS, NOW_MS + ttl_ms, owner)
  redis.call('HSET', INFO, owner, string.format('%d:%d:%d:%d:', token, NOW_MS, ttl_ms, raw) .. meta,
    LIMIT_FIELD, bound)
  if not indexed_until or indexed_until < NOW_MS + ttl_ms then index_held(NOW_MS + ttl_ms, token) end
  granted_until = math.max(granted_until or 0, NOW_MS + ttl_ms)
  state.n, state.bound = state.n + 1, bound
  return token
end
