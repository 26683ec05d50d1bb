--- @include "includes/lease_set_keys"
--- @include "includes/now"

local FENCE_MEMORY_MS = 600000

-- Fencing token: strictly greater than the last one issued for this name
-- and never below Redis time in microseconds, so tokens keep increasing even
-- after the fence key expired or a restart lost it (as long as the server
-- clock does not step back by more than the time that passed).
-- One call in the common case: SET ... GET stores Redis time and returns the
-- previous token; only if that was not below it (same microsecond, clock
-- stepped back) is the token set again to last + 1.
local function next_token()
  local last = tonumber(redis.call('SET', FENCE, NOW_US, 'PX', FENCE_MEMORY_MS, 'GET') or '0')
  if last < NOW_US then return NOW_US end
  redis.call('SET', FENCE, string.format('%d', last + 1), 'PX', FENCE_MEMORY_MS)
  return last + 1
end
