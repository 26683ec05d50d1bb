--- @include "includes/pause_left_us"

-- Pause the name for `ms` from now, unless a longer pause runs; returns the
-- pause left (ms).
local function extend_pause(pause_key, ms)
  local left = redis.call('PTTL', pause_key)
  if left >= ms then return left end
  redis.call('SET', pause_key, '1', 'PX', ms)
  pauses[pause_key] = nil  -- pause_left_us() reads it again
  return ms
end
