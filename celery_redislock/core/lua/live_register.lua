-- live_register.lua: a process states which leases it holds (see liveness.py),
-- so that once it is provably dead a worker on the same machine can give
-- them back before their TTL.  Standalone (no includes).
-- KEYS[1] index   ZSET  process id -> Redis time (ms) of its last statement,
--                 one per process space (machine boot and pid namespace),
--                 hash tag {live:<space>}
-- KEYS[2] record  STRING the process's holdings (JSON, opaque here), same tag
-- ARGV[1] process "<pid>.<start time>"
-- ARGV[2] holdings  "" when it holds nothing any more
-- ARGV[3] ttl_ms  how long the record (and the index, so that nothing is
--                 left once every process of the space is gone) outlives
--                 this statement
-- Returns 1.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[2] == '' then
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', tonumber(ARGV[3]))
redis.call('ZADD', KEYS[1], now_ms, ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
end
return 1
