--- @include "includes/now"

-- A park entry for a new call (fields: see read_entry.lua): its limit as
-- passed, its expiry `expires_in` ms from now (0: never), its task name, its
-- rate (interval_us 0: none) and its message, which its first write moves to
-- MSGS (entry_string.lua).
local function new_entry(limit, envelope, expires_in, task, interval, burst, cost)
  local expires_ms = 0
  if expires_in > 0 then expires_ms = NOW_MS + expires_in end
  return {seq = 0, expires_ms = expires_ms, enqueued_ms = NOW_MS, limit = limit, publishes = 0,
    interval = interval, burst = burst, cost = cost, task = task, envelope = envelope}
end
