-- common.lua: prepended to acquire.lua, release.lua and inspect.lua.
--
-- One lease set (a lock is a lease set with limit 1) lives in these keys, all
-- sharing the hash tag {name} so they sit in one cluster slot:
--   KEYS[1] holders  ZSET   owner -> lease expiry (Redis TIME, ms)
--   KEYS[2] info     HASH   owner -> "token:acquired_ms:ttl_ms:meta"
--   KEYS[3] fence    STRING last fencing token handed out for this name
--   KEYS[4] queue    ZSET   waiting owner -> arrival (Redis TIME, us)
--   KEYS[5] qinfo    HASH   waiting owner -> "expiry_ms:ttl_ms:meta"
--   KEYS[6] wake     key prefix; wake .. owner is that waiter's LIST, where a
--                    hand-off pushes the fencing token (BLPOP'd by the waiter)
-- Every key carries a TTL no later than the last lease or waiter in it, and
-- empty aggregates vanish, so an idle name leaves only `fence` behind, and
-- that for FENCE_MEMORY_MS.

local HOLDERS, INFO, FENCE, QUEUE, QINFO, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local FENCE_MEMORY_MS = 600000

local t = redis.call('TIME')
local NOW_MS = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- Fencing token: strictly greater than the last one issued for this name
-- and never below Redis time in microseconds, so tokens keep increasing even
-- after the fence key expired or a restart lost it (as long as the server
-- clock does not step back by more than the time that passed).
-- One call in the common case: SET ... GET stores Redis time and returns the
-- previous token; only if that was not below it (same microsecond, clock
-- stepped back) is the token set again to last + 1.
local function next_token()
  local last = tonumber(redis.call('SET', FENCE, NOW_US, 'PX', FENCE_MEMORY_MS, 'GET') or '0')
  if last < NOW_US then return NOW_US end
  redis.call('SET', FENCE, string.format('%d', last + 1), 'PX', FENCE_MEMORY_MS)
  return last + 1
end

local function remove_members(zset, hash, members)
  for i = 1, #members, 1000 do
    local chunk = {}
    for j = i, math.min(i + 999, #members) do chunk[#chunk + 1] = members[j] end
    redis.call('ZREM', zset, unpack(chunk))
    redis.call('HDEL', hash, unpack(chunk))
  end
end

-- Drop holders whose lease expired by Redis time; returns how many.
local function purge_expired_holders()
  local dead = redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', NOW_MS)
  if #dead > 0 then remove_members(HOLDERS, INFO, dead) end
  return #dead
end

-- Make the holders/info keys expire with their last lease.
local function fit_holder_ttl()
  local top = redis.call('ZRANGE', HOLDERS, -1, -1, 'WITHSCORES')
  if top[2] then
    local ms = tonumber(top[2]) - NOW_MS
    if ms > 0 then
      redis.call('PEXPIRE', HOLDERS, ms)
      redis.call('PEXPIRE', INFO, ms)
    end
  end
end

local function add_holder(owner, ttl_ms, meta)
  local token = next_token()
  redis.call('ZADD', HOLDERS, NOW_MS + ttl_ms, owner)
  redis.call('HSET', INFO, owner, string.format('%d:%d:%d:', token, NOW_MS, ttl_ms) .. meta)
  return token
end

-- The first waiter in arrival order whose wait lease is still alive;
-- lapsed waiters met on the way are removed.  Returns owner, qinfo or nil.
local function live_head()
  while true do
    local head = redis.call('ZRANGE', QUEUE, 0, 0)[1]
    if not head then return nil end
    local entry = redis.call('HGET', QINFO, head)
    if entry and tonumber(string.match(entry, '^(%d+)')) > NOW_MS then
      return head, entry
    end
    remove_members(QUEUE, QINFO, {head})
    redis.call('DEL', WAKE .. head)
  end
end

-- Hand free slots to live waiters in arrival order: each becomes a holder
-- and gets its fencing token pushed onto its wake list.  Returns how many.
local function promote(limit, wake_ttl_ms)
  local free = limit - redis.call('ZCARD', HOLDERS)
  local promoted = 0
  while free > 0 do
    local head, entry = live_head()
    if not head then break end
    local _, ttl_ms, meta = string.match(entry, '^(%d+):(%d+):(.*)$')
    remove_members(QUEUE, QINFO, {head})
    local token = add_holder(head, tonumber(ttl_ms), meta)
    redis.call('RPUSH', WAKE .. head, string.format('%d', token))
    redis.call('PEXPIRE', WAKE .. head, wake_ttl_ms)
    free = free - 1
    promoted = promoted + 1
  end
  return promoted
end

-- Remaining lease of the earliest-expiring holder (ms), or 0.
local function earliest_expiry_in()
  local first = redis.call('ZRANGE', HOLDERS, 0, 0, 'WITHSCORES')
  if first[2] then return math.max(tonumber(first[2]) - NOW_MS, 1) end
  return 0
end
