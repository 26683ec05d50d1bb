-- The pause left on `pause_key`, in microseconds (0: not paused).
local function pause_left_us(pause_key)
  local ms = redis.call('PTTL', pause_key)
  if ms > 0 then return ms * 1000 end
  return 0
end
