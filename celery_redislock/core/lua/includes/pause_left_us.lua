-- The pause left on `pause_key`, in microseconds (0: not paused), read once
-- per script call (the call's time does not move; extend_pause() forgets
-- what it changes), so an admission that checks it twice (room_now(), then
-- rate_admits() taking the units) pays one PTTL.
local pauses
--- @per_call begin
pauses = {}
--- @per_call end
local function pause_left_us(pause_key)
  local us = pauses[pause_key]
  if us == nil then
    local ms = redis.call('PTTL', pause_key)
    us = ms > 0 and ms * 1000 or 0
    pauses[pause_key] = us
  end
  return us
end
