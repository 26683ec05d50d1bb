"""The floors the benchmarks measure our scripts against: the least a script
can do and still keep a set of guarantees, as Lua texts (no library code).

``GUARANTEED_ACQ`` / ``GUARANTEED_REL``: a lock's acquire and release
(``benchmarks.redis_cost``, and around a plain task's body in the per-call
part of ``benchmarks.celery_bench``).  ``GUARD_ENQUEUE`` / ``GUARD_START`` /
``GUARD_END``: a park's three scripts (``benchmarks.backlog_app``'s
``parkguard``, and the per-call part again).
"""

from __future__ import annotations

# The least a script pair can do and still keep our guarantees on the
# uncontended path: Redis TIME, no barging past a queue, a fencing token that
# survives the key (SET ... GET on a fence key, never below Redis time), holder
# metadata with its expiry, a server-side TTL; holders in one hash (not our
# ZSET + HASH).  The release decides "held" from the key's own TTL, without TIME.
GUARANTEED_ACQ = """
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if redis.call('EXISTS', KEYS[1], KEYS[3]) > 0 then return 0 end
local last = tonumber(redis.call('SET', KEYS[2], now_us, 'PX', 600000, 'GET') or '0')
local token = now_us
if last >= now_us then token = last + 1 end
redis.call('HSET', KEYS[1], ARGV[1],
  string.format('%d:%d:', token, math.floor(now_us / 1000) + ARGV[2]) .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return token
"""
GUARANTEED_REL = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HLEN', KEYS[1]) == 1 and redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.call('DEL', KEYS[1])
end
return redis.call('HDEL', KEYS[1], ARGV[1])
"""


# The least a park that keeps its core guarantees can do, as a second floor:
# Redis TIME, leases and reservations with deadlines in one holders zset (a
# dead worker's slot lapses by itself), a promotion token per reservation that
# the start must present (a stale copy never runs), idempotence on the task
# id, the message stored once, FIFO by a sequence number, a revoke record
# read at the start, and the names' index a sweeper would read.  Left out:
# token fates, overrides, rates, TTLs, totals and the re-publish of lapsed
# reservations (a sweeper's job, off the hot path).  Three scripts per task,
# as `park`: at publish, at start and at the end.
GUARD_KEYS = ("holders", "park", "msgs", "fence", "seq")
GUARD_ENQUEUE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id, limit = ARGV[1], tonumber(ARGV[2])
if redis.call('HSETNX', KEYS[3], id, ARGV[3]) == 0 then return -1 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[2]) == 0 and redis.call('ZCARD', KEYS[1]) < limit then
  local token = redis.call('INCR', KEYS[4])
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), 'r|' .. id .. '|' .. token)
  return token
end
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[5]), id)
redis.call('ZADD', KEYS[6], now, ARGV[5])
return 0
"""
GUARD_START = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[7]) == 1 then return -1 end
local reservation = 'r|' .. ARGV[1] .. '|' .. ARGV[2]
if not redis.call('ZSCORE', KEYS[1], reservation) then return 0 end
redis.call('ZREM', KEYS[1], reservation)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[3])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
"""
GUARD_END = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if not head or redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  if not head then redis.call('ZREM', KEYS[6], ARGV[4]) end
  return false
end
redis.call('ZREM', KEYS[2], head)
local token = redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), 'r|' .. head .. '|' .. token)
return {token, redis.call('HGET', KEYS[3], head)}
"""
GUARD_DEADLINE_MS, GUARD_TTL_MS = 120_000, 60_000
