-- park_due.lua: the sweeper's one call per interval: names whose parked
-- work needs a look now (Redis time), from the index of names with parked
-- or in-flight work.  Standalone (no common.lua).
-- KEYS[1] index   ZSET name -> Redis time (ms) due
-- ARGV[1] max     most names returned
-- Returns a list of names.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[1]))
