-- refresh_prefix.lua: renew, in one call, the holders of ONE name whose owner
-- id starts with one of the given prefixes.  The worker's main process uses it
-- to keep alive the leases its live pool children hold for their running
-- tasks (owner prefix = task id, host, child pid; see core/owners.py
-- execution_prefix),
-- without knowing the random owner ids.  Standalone (no includes).
-- KEYS[1] holders ZSET  owner -> lease expiry (Redis TIME, ms)
-- KEYS[2] info    HASH  owner -> "token:acquired_ms:ttl_ms:..." (see includes/lease_set_keys.lua)
--   (both of one name, so one hash tag {name} and one cluster slot)
-- KEYS[3] held    ZSET  optional: the index of held names (HELD of includes/lease_set_keys.lua),
--                 where the name is listed until the latest renewed expiry
-- ARGV[1..n] owner id prefixes (at least one)
-- Each matching holder is renewed to Redis TIME + the ttl it was granted (from
-- its info entry), only if its lease is unexpired by Redis TIME: an expired
-- lease is never revived, and an expiry is never moved earlier.  Holders
-- without an info entry are left alone (their ttl is unknown).
-- Returns {number of holders renewed, shortest granted ttl among them in ms
-- (0 if none)}.

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holders, info = KEYS[1], KEYS[2]
local live = redis.call('ZRANGEBYSCORE', holders, '(' .. now_ms, '+inf', 'WITHSCORES')
local renewed, shortest, latest = 0, 0, 0
for i = 1, #live, 2 do
  local owner, expiry = live[i], tonumber(live[i + 1])
  local match = false
  for j = 1, #ARGV do
    if string.sub(owner, 1, #ARGV[j]) == ARGV[j] then match = true break end
  end
  if match then
    local entry = redis.call('HGET', info, owner)
    local ttl_ms = entry and tonumber(string.match(entry, '^%d+:%d+:(%d+):'))
    if ttl_ms then
      local new_expiry = math.max(expiry, now_ms + ttl_ms)
      redis.call('ZADD', holders, new_expiry, owner)
      latest = math.max(latest, new_expiry)
      renewed = renewed + 1
      if shortest == 0 or ttl_ms < shortest then shortest = ttl_ms end
    end
  end
end
if latest > 0 and KEYS[3] then
  redis.call('ZADD', KEYS[3], 'GT', latest, string.match(holders, '{([^}]*)}'))
end
if latest > 0 and redis.call('PTTL', holders) < latest - now_ms then
  redis.call('PEXPIRE', holders, latest - now_ms)
  redis.call('PEXPIRE', info, latest - now_ms)
end
return {renewed, shortest}
