-- acquire.lua: take a slot now, or (when asked to wait) join the FIFO queue.
-- KEYS: the six keys of common.lua.
-- ARGV[1] owner       random 128-bit hex id of this acquisition
-- ARGV[2] limit       slots in the set (1 for a lock)
-- ARGV[3] ttl_ms      lease length
-- ARGV[4] meta        opaque holder description (JSON), stored for inspection
-- ARGV[5] wait        "1": enqueue/refresh our place in the queue if not granted
-- ARGV[6] wait_ms     how long a queue entry lives without being renewed
-- Returns the fencing token (> 0) when `owner` holds a slot (also when a
-- hand-off made it a holder before it asked again), else -retry_in_ms (< 0):
-- when to ask again at the latest if no hand-off arrives (earliest holder
-- expiry).  One integer, because parsing a reply is part of every acquire.
-- A caller is granted only while fewer than `limit` hold and no live waiter
-- queued before it is still waiting: newcomers never barge past the queue.

local owner, limit, ttl_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local meta, wait, wait_ms = ARGV[4], ARGV[5] == '1', tonumber(ARGV[6])

-- Fast path: nobody holds or waits (the common uncontended case).
if redis.call('EXISTS', HOLDERS, QUEUE) == 0 then
  local token = add_holder(owner, ttl_ms, meta)
  redis.call('PEXPIRE', HOLDERS, ttl_ms)
  redis.call('PEXPIRE', INFO, ttl_ms)
  return token
end

-- A hand-off (ours or one promote() makes now) shows as us being a holder.
-- If its info entry was lost (the info key deleted), it gets a new token.
local function held_reply()
  local mine = redis.call('ZSCORE', HOLDERS, owner)
  if mine and tonumber(mine) > NOW_MS then
    redis.call('DEL', WAKE .. owner)
    local info = redis.call('HGET', INFO, owner)
    if info then return tonumber(string.match(info, '^(%d+)')) end
    local token = next_token()
    redis.call('HSET', INFO, owner, string.format('%d:%d:%d:', token, NOW_MS, ttl_ms) .. meta)
    fit_holder_ttl()
    return token
  end
  return nil
end

local reply = held_reply()
if reply then return reply end

local changed = purge_expired_holders() + promote(limit, wait_ms)
if changed > 0 then
  reply = held_reply()
  if reply then return reply end
end

-- promote() leaves a free slot only when no live waiter is queued.
if redis.call('ZCARD', HOLDERS) < limit then
  local token = add_holder(owner, ttl_ms, meta)
  fit_holder_ttl()
  return token
end

-- Holders changed only if some were purged or promoted (the common case
-- under contention is neither: the caller just queues).
if changed > 0 then fit_holder_ttl() end
if wait then
  redis.call('ZADD', QUEUE, 'NX', NOW_US, owner)  -- keeps an earlier arrival
  redis.call('HSET', QINFO, owner, string.format('%d:%d:', NOW_MS + wait_ms, ttl_ms) .. meta)
  if redis.call('PTTL', QUEUE) < wait_ms then
    redis.call('PEXPIRE', QUEUE, wait_ms)
    redis.call('PEXPIRE', QINFO, wait_ms)
  end
end
local retry_in = earliest_expiry_in()
if retry_in == 0 then retry_in = wait_ms end
return -retry_in
