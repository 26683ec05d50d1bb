-- limit_block.lua: note that the parked head of a name waits for this
-- listed limit (a run of it was refused because the limit was full), so
-- that a release of the limit wakes the name (limit_wake.lua).
-- Standalone (no includes).
-- KEYS[1] blocked  ZSET  <prefix>:{<limit name>}:blocked: name whose head
--                        waits -> Redis time (ms) it was first noted
-- KEYS[2] limits   HASH  <prefix>:{<limit name>}:blocked:limits: name ->
--                        the limit its head asks of this limit, as passed
--                        (limit_of(): an override applies); both keys live
--                        ARGV[3] ms after the last note
-- ARGV[1] the name whose head waits
-- ARGV[2] its limit of this listed limit
-- ARGV[3] ttl_ms
-- Returns 1 if noted now, 0 if it was noted already (it keeps its place).

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local added = redis.call('ZADD', KEYS[1], 'NX', now_ms, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[3]))
return added
