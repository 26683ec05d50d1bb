--- @include "includes/hold_state_guard"
--- @include "includes/lease_set_keys"
--- @include "includes/next_due"
--- @include "includes/now"
--- @include "includes/park"
--- @include "includes/park_keys"
--- @include "includes/unpark"

-- Park a new call, task `id` (entry `e`), at the tail of the name's park:
-- it found no room now (`slot`: a slot was free, its rate or a pause admits
-- it in `wait_us`).  `opts` (park_enqueue.lua's options):
--   keep_latest      it first takes out every task parked before it but
--                    the run put back at the head (PMETA head: a pause or
--                    a retry of the running run; taken out too with
--                    supersede), so the name holds at most one parked call,
--                    and no bound refuses it;
--   max_parked       else the name's park at this length refuses it, and
--   max_total        the parked tasks of all names at this total (TOTAL: a
--                    single server) refuse it: nothing is stored;
--   debounce_ms      its promotion waits this long after this call (PMETA
--   debounce_max_ms  hold), but no later than debounce_max_ms after the
--                    burst's first call (the first that replaced nothing:
--                    PMETA dfirst);
--   supersede        every current holder is marked superseded
--                    (SUPERSEDED_FIELD: the last fencing token handed out
--                    and this task id);
--   unseen           its caller's states reach nobody (no result backend,
--                    no events: parking/states.py STATES_SEEN), so no
--                    state guard is taken for its PARKED (guard '').
-- Returns park_enqueue.lua's reply: {'parked', n_parked, rate_wait_ms,
-- replaced ids, guard, due} (guard: the holder of the task's state guard,
-- taken for its PARKED, see hold_state_guard.lua) | {'bounded', n_parked,
-- due} | {'bounded_total', n_total, due}.
local function park_call(id, e, n_parked, slot, wait_us, n_holders, limit, opts)
  local replaced = {}
  if opts.keep_latest then
    local head = not opts.supersede and redis.call('HGET', PMETA, 'head')
    for _, older in ipairs(redis.call('ZRANGE', PARK, 0, -1)) do
      if older ~= head then
        unpark(older)
        redis.call('HDEL', MSGS, older)
        replaced[#replaced + 1] = older
      end
    end
    n_parked = n_parked - #replaced
  else
    if (opts.max_parked or 0) > 0 and n_parked >= opts.max_parked then
      return {'bounded', n_parked, next_due(limit)}
    end
    if (opts.max_total or 0) > 0 and TOTAL then
      local total = tonumber(redis.call('GET', TOTAL) or '0')
      if total >= opts.max_total then return {'bounded_total', total, next_due(limit)} end
    end
  end
  if (opts.debounce_ms or 0) > 0 then
    local first = NOW_MS
    if #replaced > 0 then first = tonumber(redis.call('HGET', PMETA, 'dfirst') or NOW_MS) end
    local hold = NOW_MS + opts.debounce_ms
    if (opts.debounce_max_ms or 0) > 0 then hold = math.min(hold, first + opts.debounce_max_ms) end
    redis.call('HSET', PMETA, 'dfirst', first, 'hold', hold)
  end
  e.seq = redis.call('HINCRBY', PMETA, 'seq', 1)
  park(id, e)
  if opts.supersede and redis.call('EXISTS', INFO) == 1 then
    redis.call('HSET', INFO, SUPERSEDED_FIELD, (redis.call('GET', FENCE) or '0') .. '|' .. id)
  end
  local rate_wait_ms = 0
  if slot then rate_wait_ms = math.ceil(wait_us / 1000) end
  local guard = ''
  if not opts.unseen then guard = hold_state_guard(id, string.format('k%d', NOW_US)) end
  return {'parked', n_parked + 1, rate_wait_ms, replaced, guard, next_due(limit, n_holders, true)}
end
