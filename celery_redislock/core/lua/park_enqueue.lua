-- park_enqueue.lua: the one admission decision of a park-policy task, at
-- enqueue (mode "enqueue") and when a message without a reservation reaches
-- a worker (mode "arrive").
-- KEYS: the thirteen keys of park_common.lua (KEYS[12], KEYS[13] only on a single server).
-- ARGV[1] name
-- ARGV[2] mode         "enqueue" | "arrive"
-- ARGV[3] task_id
-- ARGV[4] limit
-- ARGV[5] envelope     the message as stored for re-publishing (opaque JSON)
-- ARGV[6] expires_in   ms until the task expires (0: never)
-- ARGV[7] deadline_ms  how long a reservation waits for its message to arrive
-- ARGV[8] max_parked   park length bound for this name (0: none)
-- ARGV[9] owner        mode "arrive": lease owner to add as holder
-- ARGV[10] ttl_ms      mode "arrive": lease length
-- ARGV[11] meta        mode "arrive": holder meta (JSON)
-- ARGV[12] max_total   bound of the parked tasks over all names (0: none;
--                      needs KEYS[13], so a single server)
-- ARGV[13] task        the task name (stored with the entry, see own_limit())
-- The name is *full* when no holder may join (reservations included; see
-- admissible() in common.lua: the limits of every holder count), or anything
-- is parked: then the task is parked (FIFO, so no newcomer
-- overtakes parked work).  Otherwise "enqueue" reserves a slot (the caller
-- publishes with the token) and "arrive" takes the slot as a lease.
-- Returns {"parked", n_parked, due} | {"reserved", token, due} |
-- {"held", fencing_token, due} | {"dup", where, due} (already parked or in
-- flight: idempotent) | {"bounded", n_parked, due} (park list at its bound;
-- nothing stored) | {"bounded_total", n_total, due} (all names together at
-- redislock_park_max_total; nothing stored).  due: see next_due() (for the cluster index).

--- @include park_common.lua

local mode, id, limit = ARGV[2], ARGV[3], stored_limit(tonumber(ARGV[4]))
local envelope, expires_in, deadline_ms = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local max_parked, max_total = tonumber(ARGV[8]), tonumber(ARGV[12] or '0')

if redis.call('HEXISTS', PARKED, id) == 1 then return {'dup', 'parked', next_due(limit)} end
if redis.call('HEXISTS', INFLIGHT, id) == 1 then return {'dup', 'inflight', next_due(limit)} end

purge_expired_holders()
reclaim_overdue()
local expires_ms = 0
if expires_in > 0 then expires_ms = NOW_MS + expires_in end

local n_parked = redis.call('ZCARD', PARK)
local state = holder_state()
if n_parked > 0 or not admissible(state, limit) then
  if max_parked > 0 and n_parked >= max_parked then
    return {'bounded', n_parked, next_due(limit)}
  end
  if max_total > 0 and TOTAL then
    local total = tonumber(redis.call('GET', TOTAL) or '0')
    if total >= max_total then return {'bounded_total', total, next_due(limit)} end
  end
  local seq = redis.call('HINCRBY', PMETA, 'seq', 1)
  park(id, {seq = seq, expires_ms = expires_ms, enqueued_ms = NOW_MS, limit = limit,
    publishes = 0, task = ARGV[13], envelope = envelope})
  return {'parked', n_parked + 1, next_due(limit)}
end

if mode == 'enqueue' then
  local token = reserve(state, id, {seq = 0, expires_ms = expires_ms, enqueued_ms = NOW_MS,
    limit = limit, publishes = 0, task = ARGV[13], envelope = envelope}, deadline_ms)
  fit_holder_ttl()
  return {'reserved', token, next_due(limit)}
end
local token = add_holder(state, ARGV[9], tonumber(ARGV[10]), limit, ARGV[11])
fit_holder_ttl()
return {'held', token, next_due(limit)}
