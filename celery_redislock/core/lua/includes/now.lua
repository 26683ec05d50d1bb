-- Redis time of this script call, read once: every decision reads it, never a
-- client's clock, and it does not move while the script runs.
local NOW_MS, NOW_US
--- @per_call begin
do
  local t = redis.call('TIME')
  NOW_MS = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
--- @per_call end
