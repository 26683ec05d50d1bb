-- park_enqueue.lua: the one admission decision of a park task, at enqueue
-- (mode "enqueue"), when a message without a reservation reaches a worker
-- (mode "arrive"), and for a run of another policy that has a rate (mode
-- "try": never parks).
-- KEYS: the nineteen keys of park_common.lua (KEYS[17] to KEYS[19] only on a single server).
-- ARGV[1] name
-- ARGV[2] mode         "enqueue" | "arrive" | "try" | "head" (a running task
--                      pauses its key and goes back to the head of the park)
-- ARGV[3] task_id
-- ARGV[4] limit        the caller's limit; < 0 fixed (see limit_of() in common.lua)
-- ARGV[5] envelope     the message as stored for re-publishing (opaque JSON)
-- ARGV[6] expires_in   ms until the task expires (0: never)
-- ARGV[7] deadline_ms  how long a reservation waits for its message to arrive
-- ARGV[8] max_parked   park length bound for this name (0: none)
-- ARGV[9] owner        modes "arrive", "try": lease owner to add as holder
-- ARGV[10] ttl_ms      modes "arrive", "try": lease length
-- ARGV[11] meta        modes "arrive", "try": holder meta (JSON)
-- ARGV[12] max_total   bound of the parked tasks over all names (0: none;
--                      needs KEYS[18], so a single server)
-- ARGV[13] task        the task name (stored with the entry, see own_limit())
-- ARGV[14] interval_us the task's rate: microseconds per unit (0: no rate)
-- ARGV[15] burst       units that may start back to back
-- ARGV[16] cost        units this start takes (1 <= cost <= burst)
-- ARGV[17] pause_ms    mode "head": pause the name this long (a pause only lengthens)
-- ARGV[18] token       mode "head": the promotion token the run was claimed with
--                      ("": none); it becomes stale, so a copy of the run's
--                      message (redelivered after a crash) never runs
-- ARGV[19] replace     modes "enqueue", "arrive": "1" keeps the latest only
--                      (lock_policy keep_latest): a task that parks takes out
--                      every task parked before it but the run put back at
--                      the head (PMETA head: a pause or a retry of the running
--                      run; taken out too with ARGV[22]), so the name holds at
--                      most one parked call (and neither bound, ARGV[8] nor
--                      ARGV[12], refuses it)
-- ARGV[20] debounce_ms modes "enqueue", "arrive" (> 0: lock_debounce, with
--                      ARGV[19]): the task always parks, and is promoted no
--                      sooner than debounce_ms after this call (PMETA hold)
-- ARGV[21] debounce_max_ms  (> 0) but no later than this after the first call
--                      of the burst (the first that replaced nothing; PMETA
--                      dfirst), a slot free
-- ARGV[22] supersede   modes "enqueue", "arrive": "1" (lock_supersede): a
--                      task that parks marks every current holder superseded
--                      (SUPERSEDED_FIELD of common.lua: the last fencing token
--                      handed out and this task id)
-- The name is *full* when no holder may join (reservations included; see
-- admissible() in common.lua: the limits of every holder count), or anything
-- is parked: then the task is parked (FIFO, so no newcomer overtakes parked
-- work).  It is parked too when a slot is free but its rate (or a pause)
-- does not admit it now; promotion publishes it when it does.  Otherwise the
-- slot and the rate's units are taken together: "enqueue" reserves the slot
-- (the caller publishes with the token), "arrive" and "try" take it as a lease.
-- Returns {"parked", n_parked, rate_wait_ms, replaced, due} (rate_wait_ms > 0:
-- a slot was free but the rate or a pause admits it only then; replaced: the
-- ids of the tasks it took out, with ARGV[19]) | {"reserved", token, due} |
-- {"held", fencing_token, due, start_wait_us} (see park_claim.lua) | {"dup", where, due} (already parked or in
-- flight: idempotent) | {"bounded", n_parked, due} (park list at its bound;
-- nothing stored) | {"bounded_total", n_total, due} (all names together at
-- redislock_park_max_total; nothing stored) | mode "try" only: {"full", 0, due}
-- (no slot) | {"rate", wait_ms, due} (the rate or a pause admits it in
-- wait_ms).  Mode "head" parks the task ahead of all parked work, whatever
-- the slots and bounds (it was admitted once), and returns {"parked", n, pause_ms, due}.
-- due: see next_due() (for the cluster index).

--- @include park_common.lua

local mode, id, limit = ARGV[2], ARGV[3], stored_limit(tonumber(ARGV[4]))
local envelope, expires_in, deadline_ms = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local max_parked, max_total = tonumber(ARGV[8]), tonumber(ARGV[12] or '0')
local debounce_ms, debounce_max_ms = tonumber(ARGV[20] or '0'), tonumber(ARGV[21] or '0')

if mode ~= 'try' then
  if redis.call('HEXISTS', PARKED, id) == 1 then return {'dup', 'parked', next_due(limit)} end
  if redis.call('HEXISTS', INFLIGHT, id) == 1 then return {'dup', 'inflight', next_due(limit)} end
end

purge_expired_holders()
reclaim_overdue()
local expires_ms = 0
if expires_in > 0 then expires_ms = NOW_MS + expires_in end
local entry = {seq = 0, expires_ms = expires_ms, enqueued_ms = NOW_MS, limit = limit,
  publishes = 0, interval = tonumber(ARGV[14] or '0'), burst = tonumber(ARGV[15] or '1'),
  cost = tonumber(ARGV[16] or '1'), task = ARGV[13], envelope = envelope}

local n_parked = redis.call('ZCARD', PARK)
if mode == 'head' then
  local pause_ms = extend_pause(PAUSE, tonumber(ARGV[17]))
  if ARGV[18] ~= '' then
    redis.call('ZREM', TOKENS, 'c|' .. id .. '|' .. ARGV[18])
    supersede(id, ARGV[18])
  end
  local first = redis.call('ZRANGE', PARK, 0, 0, 'WITHSCORES')
  entry.seq = first[2] and tonumber(first[2]) - 1 or redis.call('HINCRBY', PMETA, 'seq', 1)
  park(id, entry)
  redis.call('HSET', PMETA, 'head', id)
  return {'parked', n_parked + 1, pause_ms, next_due(limit, nil, true)}
end
local state = holder_state()
local slot = debounce_ms == 0 and n_parked == 0 and admissible(state, limit_of(limit))
local rate_ok, wait_us = false, 0
if slot then rate_ok, wait_us = rate_admits(entry, false) end
local start_us = 0  -- a run admitted now: its wait before its body starts
if rate_ok and mode ~= 'enqueue' then
  start_us = start_wait(entry)
  if start_us > MAX_START_WAIT_US then rate_ok, wait_us = false, start_us end
end

if mode == 'try' then
  if not slot then return {'full', 0, next_due(limit, state.n, n_parked > 0)} end
  if not rate_ok then
    return {'rate', math.ceil(wait_us / 1000), next_due(limit, state.n, n_parked > 0)}
  end
elseif not (slot and rate_ok) then
  local replaced = {}
  if ARGV[19] == '1' then
    local head = ARGV[22] ~= '1' and redis.call('HGET', PMETA, 'head')
    for _, older in ipairs(redis.call('ZRANGE', PARK, 0, -1)) do
      if older ~= head then
        unpark(older)
        redis.call('HDEL', MSGS, older)
        replaced[#replaced + 1] = older
      end
    end
    n_parked = n_parked - #replaced
  end
  if max_parked > 0 and n_parked >= max_parked and ARGV[19] ~= '1' then
    return {'bounded', n_parked, next_due(limit)}
  end
  if max_total > 0 and TOTAL and ARGV[19] ~= '1' then
    local total = tonumber(redis.call('GET', TOTAL) or '0')
    if total >= max_total then return {'bounded_total', total, next_due(limit)} end
  end
  if debounce_ms > 0 then
    local first = NOW_MS
    if #replaced > 0 then first = tonumber(redis.call('HGET', PMETA, 'dfirst') or NOW_MS) end
    local hold = NOW_MS + debounce_ms
    if debounce_max_ms > 0 then hold = math.min(hold, first + debounce_max_ms) end
    redis.call('HSET', PMETA, 'dfirst', first, 'hold', hold)
  end
  entry.seq = redis.call('HINCRBY', PMETA, 'seq', 1)
  park(id, entry)
  if ARGV[22] == '1' and redis.call('EXISTS', INFO) == 1 then
    redis.call('HSET', INFO, SUPERSEDED_FIELD, (redis.call('GET', FENCE) or '0') .. '|' .. id)
  end
  local rate_wait_ms = 0
  if slot then rate_wait_ms = math.ceil(wait_us / 1000) end
  return {'parked', n_parked + 1, rate_wait_ms, replaced, next_due(limit, state.n, true)}
end

rate_admits(entry, true)  -- admitted just above: takes the units with the slot
if mode == 'enqueue' then
  local token = reserve(state, id, entry, deadline_ms)
  fit_holder_ttl()
  return {'reserved', token, next_due(limit, state.n, false)}
end
local token = add_holder(state, ARGV[9], tonumber(ARGV[10]), limit, ARGV[11])
fit_holder_ttl()
return {'held', token, next_due(limit, state.n, false), start_us}
