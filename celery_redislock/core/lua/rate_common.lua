-- rate_common.lua: GCRA (the generic cell rate algorithm) over one key per
-- name, and the name's pause; included by the scripts that admit starts.
-- Keys it reads (the includer passes them, same hash tag as the name):
--   the rate key   STRING  the theoretical arrival time (TAT), Redis time in
--                          microseconds; expires when the bucket is full again
--   the pause key  STRING  present while starts of the name are paused; its
--                          PTTL is the pause left
--   the override   HASH    run-time override of the name's rate (override.lua):
--                          "interval_us" and "burst" replace the caller's
-- A start of cost c is admitted at time `now` when
--   max(TAT, now) + c * interval - burst * interval <= now
-- (interval: period / count), and then TAT becomes max(TAT, now) + c * interval.
-- So at most `burst` start back to back, and over any window of length w at
-- most burst + w / interval units start (plus lag / interval when the schedule
-- is kept behind, see gcra()).  All times are Redis TIME.

-- How far behind a parked backlog's schedule may be kept (see gcra()); the
-- rate key outlives its TAT by as much, so a late promotion still reads it.
local SCHEDULE_LAG_US = 5000

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The pause left on `pause_key`, in microseconds (0: not paused).
local function pause_left_us(pause_key)
  local ms = redis.call('PTTL', pause_key)
  if ms > 0 then return ms * 1000 end
  return 0
end

-- The rate a start is checked against: the name's run-time override when
-- one is set (then also for a start whose task has no rate of its own),
-- else the caller's.  A cost above an overriding burst counts as the whole
-- burst: it could never start otherwise.
local overrides = {}  -- override key -> {interval_us, burst}, read once per script call
local function rate_terms(override_key, interval, burst, cost)
  local o = overrides[override_key]
  if o == nil then
    o = redis.call('HMGET', override_key, 'interval_us', 'burst')
    overrides[override_key] = o
  end
  if o[1] then
    interval, burst = tonumber(o[1]), tonumber(o[2])
    if cost > burst then cost = burst end
  end
  return interval, burst, cost
end

-- Pause the name for `ms` from now, unless a longer pause runs; returns the
-- pause left (ms).
local function extend_pause(pause_key, ms)
  local left = redis.call('PTTL', pause_key)
  if left >= ms then return left end
  redis.call('SET', pause_key, '1', 'PX', ms)
  return ms
end

-- Starts keep the rate too, not only admissions: a promotion takes its units
-- when it is published, and its message reaches a worker a variable time
-- later, so two runs admitted an interval apart could start closer.  The
-- start schedule (`started_key`, a TAT of starts, strict: no lag) says how
-- long a run admitted at `now` waits before its body starts: at most `burst`
-- start back to back and at most burst + w / interval in any window w.  The
-- waits stay within the spread of delivery delays, since the admissions
-- themselves keep the schedule.  Returns the wait (us); it is recorded only
-- when at most `max_wait` (the caller parks the run otherwise).
local function start_delay(started_key, now, interval, burst, cost, max_wait)
  local tat = tonumber(redis.call('GET', started_key) or '0')
  if tat < now then tat = now end
  local new_tat = tat + interval * cost
  local wait = math.max(new_tat - interval * burst - now, 0)
  if wait <= max_wait then
    redis.call('SET', started_key, string.format('%.0f', new_tat),
      'PX', math.ceil((new_tat - now) / 1000) + 1)
  end
  return math.ceil(wait)
end

-- Whether a start of `cost` conforms at `now`; if it does and `take` is
-- true, it is taken.  Returns admitted (true/false) and, when not admitted,
-- the microseconds until it would be (the pause included).  `lag` (us, 0 for
-- a start that arrives) is how far behind `now` the schedule may be kept: a
-- parked backlog promoted up to `lag` after its due time takes its units at
-- that due time, so the next is not pushed back by the promotion's own delay.
local function gcra(rate_key, pause_key, now, interval, burst, cost, take, lag)
  local paused = pause_left_us(pause_key)
  local tat = tonumber(redis.call('GET', rate_key) or '0')
  if tat < now - lag then tat = now - lag end
  local new_tat = tat + interval * cost
  local wait = new_tat - interval * burst - now
  if paused > wait then wait = paused end
  if wait > 0 then return false, math.ceil(wait) end
  if take then
    redis.call('SET', rate_key, string.format('%.0f', new_tat),
      'PX', math.ceil((new_tat - now + SCHEDULE_LAG_US) / 1000) + 1)
  end
  return true, 0
end
