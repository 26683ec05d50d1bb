--- @include "includes/lease_set_keys"

-- Admission state of the current holders: their count and a lower bound of
-- their limits (read lazily, at most once per script).
local function holder_state()
  return {n = redis.call('ZCARD', HOLDERS), bound = nil, exact = false}
end
