-- refresh.lua: renew many leases in one call (the heartbeat's batch), each
-- only if it is still held and unexpired by Redis time: an expired lease is
-- never revived.  Standalone (no includes); on a cluster it is called once
-- per lease set so that each call touches one slot.
-- KEYS: for lease i, KEYS[2i-1] = holders ZSET, KEYS[2i] = info HASH; and,
--   when #KEYS is odd, the last key is the index of held names (HELD in
--   includes/lease_set_keys.lua), where each renewed lease's name is listed until its new expiry.
-- ARGV: for lease i, ARGV[2i-1] = owner, ARGV[2i] = ttl_ms.
-- Returns a list with, per lease, the new remaining lease in ms, or 0 if the
-- lease is gone (expired, released, deleted, or Redis lost its data); the
-- remaining lease is negative when the lease is superseded (its token is at
-- most the one in the info hash's field ':superseded', see includes/lease_set_keys.lua).

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local result = {}
local held = (#KEYS % 2 == 1) and KEYS[#KEYS] or nil
for i = 1, math.floor(#KEYS / 2) do
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
    if held then redis.call('ZADD', held, 'GT', new_expiry, string.match(holders, '{([^}]*)}')) end
    local remaining = new_expiry - now_ms
    local superseded = redis.call('HGET', info, ':superseded')
    if superseded then
      local token = tonumber(string.match(redis.call('HGET', info, owner) or '', '^(%d+)') or '')
      if token and token <= tonumber(string.match(superseded, '^(%d+)')) then
        remaining = -remaining
      end
    end
    result[i] = remaining
  else
    result[i] = 0
  end
end
return result
