-- park_wake.lua: have the sweepers look at a name now (after its pause was
-- lifted): re-score it in the index of names with parked work, if it is
-- there, and publish on the index's wake channel.  Standalone (no includes).
-- KEYS[1] index   ZSET name -> Redis time (ms) due
-- ARGV[1] name
-- Returns 1 if the name is indexed (so it has parked or in-flight work), else 0.

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now_ms, ARGV[1])
redis.pcall('PUBLISH', KEYS[1] .. ':wake', now_ms)  -- best effort, see includes/next_due.lua
return 1
