-- refresh.lua: renew many leases in one call (the heartbeat's batch), each
-- only if it is still held and unexpired by Redis time: an expired lease is
-- never revived.  Standalone (no common.lua); on a cluster it is called once
-- per lease set so that each call touches one slot.
-- KEYS: for lease i, KEYS[2i-1] = holders ZSET, KEYS[2i] = info HASH.
-- ARGV: for lease i, ARGV[2i-1] = owner, ARGV[2i] = ttl_ms.
-- Returns a list with, per lease, the new remaining lease in ms, or 0 if the
-- lease is gone (expired, released, deleted, or Redis lost its data).

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local result = {}
for i = 1, #KEYS / 2 do
  local holders, info = KEYS[2 * i - 1], KEYS[2 * i]
  local owner, ttl_ms = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local expiry = redis.call('ZSCORE', holders, owner)
  if expiry and tonumber(expiry) > now_ms then
    local new_expiry = math.max(tonumber(expiry), now_ms + ttl_ms)
    redis.call('ZADD', holders, new_expiry, owner)
    if redis.call('PTTL', holders) < new_expiry - now_ms then
      redis.call('PEXPIRE', holders, new_expiry - now_ms)
      redis.call('PEXPIRE', info, new_expiry - now_ms)
    end
    result[i] = new_expiry - now_ms
  else
    result[i] = 0
  end
end
return result
