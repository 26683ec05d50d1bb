-- acquire.lua: take a slot now, or (when asked to wait) join the FIFO queue.
-- KEYS: the seven keys of includes/lease_set_keys.lua, and KEYS[8] HELD (optional; see includes/lease_set_keys.lua).
-- ARGV[1] owner       random 128-bit hex id of this acquisition (no ':')
-- ARGV[2] limit       the caller's limit: slots in the set; < 0 for a fixed
--                     limit no override changes (-1 for a lock; see limit_of())
-- ARGV[3] ttl_ms      lease length
-- ARGV[4] meta        opaque holder description (JSON object), stored for inspection
-- ARGV[5] wait        "1": enqueue/refresh our place in the queue if not granted
-- ARGV[6] max_wait_ms longest wait lease of a queue entry (wait_lease() in
--                     includes/lease_set_keys.lua), and the lifetime of a wake list
-- Returns the fencing token (> 0) when `owner` holds a slot (also when a
-- hand-off made it a holder before it asked again), else -retry_in_ms (< 0):
-- when to ask again at the latest if no hand-off or nudge arrives: the
-- earliest holder expiry, capped at half the wait lease (the queue entry
-- lapses half a wait lease after that, unless renewed by asking again).
-- One integer, because parsing a reply is part of every acquire.
-- A caller is granted only while THE INVARIANT of includes/lease_set_keys.lua allows it and
-- no live waiter queued before it is still waiting: newcomers never barge
-- past the queue.  A token returned means the lease runs ttl_ms from this
-- call at least (a hand-off received earlier is renewed here).

--- @include "includes/add_holder"
--- @include "includes/admissible"
--- @include "includes/earliest_expiry"
--- @include "includes/fit_holder_ttl"
--- @include "includes/hand_off"
--- @include "includes/holder_state"
--- @include "includes/lease_set_keys"
--- @include "includes/limit_of"
--- @include "includes/next_token"
--- @include "includes/now"
--- @include "includes/purge_expired_holders"
--- @include "includes/wait_lease"

HELD = KEYS[8]
local owner, raw_limit, ttl_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local limit = limit_of(raw_limit)
local meta, wait, max_wait_ms = ARGV[4], ARGV[5] == '1', tonumber(ARGV[6])

-- Fast path: nobody holds or waits (the common uncontended case).
if redis.call('EXISTS', HOLDERS, QUEUE) == 0 then
  local token = add_holder({n = 0}, owner, ttl_ms, raw_limit, meta)
  redis.call('PEXPIRE', HOLDERS, ttl_ms)
  redis.call('PEXPIRE', INFO, ttl_ms)
  return token
end

-- A hand-off (ours or one hand_off() makes now) shows as us being a holder.
-- If its info entry was lost (the info key deleted), it gets a new token.
local function held_reply()
  local mine = redis.call('ZSCORE', HOLDERS, owner)
  if mine and tonumber(mine) > NOW_MS then
    redis.call('DEL', WAKE .. owner)
    local renew = tonumber(mine) < NOW_MS + ttl_ms
    if renew then
      -- Granted before this request was sent: the caller counts its lease
      -- from the send time, so the lease must run ttl_ms from now.
      redis.call('ZADD', HOLDERS, NOW_MS + ttl_ms, owner)
    end
    local info = redis.call('HGET', INFO, owner)
    if info then
      if renew then fit_holder_ttl() end
      return tonumber(string.match(info, '^(%d+)'))
    end
    local token = next_token()
    redis.call('HSET', INFO, owner, string.format('%d:%d:%d:%d:', token, NOW_MS, ttl_ms, raw_limit) .. meta)
    fit_holder_ttl()
    return token
  end
  return nil
end

local reply = held_reply()
if reply then return reply end

local changed = purge_expired_holders()
local state = holder_state()
local promoted, waiting = hand_off(state, max_wait_ms, owner)
changed = changed + promoted
if promoted > 0 then
  reply = held_reply()
  if reply then return reply end
end

-- Granted directly only if no live waiter is left (hand_off() stopped at none).
if not waiting and admissible(state, limit) then
  local token = add_holder(state, owner, ttl_ms, raw_limit, meta)
  fit_holder_ttl()
  return token
end

-- Holders changed only if some were purged or promoted (the common case
-- under contention is neither: the caller just queues).
if changed > 0 then fit_holder_ttl() end
local half = math.floor(wait_lease(ttl_ms, max_wait_ms) / 2)
local retry_in = half
local first = earliest_expiry()
if first then retry_in = math.min(math.max(first - NOW_MS, 1), half) end
if wait then
  -- The entry lives until the promised re-ask (NOW + retry_in) plus a grace
  -- of half a wait lease; hand_off() reads the promise back from it.
  local lives = retry_in + half
  redis.call('ZADD', QUEUE, 'NX', NOW_US, owner)  -- keeps an earlier arrival
  redis.call('HSET', QINFO, owner, string.format('%d:%d:%d:', NOW_MS + lives, ttl_ms, raw_limit) .. meta)
  if redis.call('PTTL', QUEUE) < lives then
    redis.call('PEXPIRE', QUEUE, lives)
    redis.call('PEXPIRE', QINFO, lives)
  end
end
return -retry_in
