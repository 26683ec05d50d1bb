--- @include "includes/lease_set_keys"
--- @include "includes/recompute_holders_limit"

-- May a caller with `limit` become a holder beside the current ones?
local function admissible(state, limit)
  if state.n >= limit then return false end
  if state.n == 0 then return true end
  if state.bound == nil then
    state.bound = tonumber(redis.call('HGET', INFO, LIMIT_FIELD) or '0')
    if state.bound == 0 then  -- missing (the info key was deleted): compute it
      state.bound, state.exact = recompute_holders_limit(), true
    end
  end
  if state.n < state.bound then return true end
  if not state.exact then
    state.bound, state.exact = recompute_holders_limit(), true
    return state.n < state.bound
  end
  return false
end
