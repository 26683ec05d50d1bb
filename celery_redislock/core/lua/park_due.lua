-- park_due.lua: what a sweeper asks before it promotes: the names whose
-- parked work needs a look now (Redis time), from the index of names with
-- parked or in-flight work, and how long it may sleep after them.
-- Standalone (no includes).
-- KEYS[1] index   ZSET name -> Redis time (ms) due
-- ARGV[1] max     most names returned
-- ARGV[2] hold_ms the names returned are not returned again for this long
--                 (one sweeper promotes a due name, not every worker's at
--                 once), unless a park call re-scores them first, as the
--                 promotion of the sweeper that took them does
-- Returns {next_ms, name...}: next_ms is how long until the index's earliest
-- time after this call (-1: the index is empty).

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local names = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[1]))
for _, name in ipairs(names) do
  redis.call('ZADD', KEYS[1], 'XX', now_ms + tonumber(ARGV[2]), name)
end
local next_ms = -1
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then next_ms = math.max(tonumber(first[2]) - now_ms, 0) end
local out = {next_ms}
for _, name in ipairs(names) do out[#out + 1] = name end
return out
