-- Starts keep the rate too, not only admissions: a promotion takes its units
-- when it is published, and its message reaches a worker a variable time
-- later, so two runs admitted an interval apart could start closer.  The
-- start schedule (`started_key`, a TAT of starts, strict: no lag) says how
-- long a run admitted at `now` waits before its body starts: at most `burst`
-- start back to back and at most burst + w / interval in any window w.  The
-- waits stay within the spread of delivery delays, since the admissions
-- themselves keep the schedule.  Returns the wait (us); it is recorded only
-- when at most `max_wait` (the caller parks the run otherwise).
-- The longest a run waits before its body starts to keep the rate of starts
-- (the spread of delivery delays, normally milliseconds); a run that would
-- wait longer (a rate lowered while its promotion was on its way) goes back
-- to the park instead of holding a worker process.
local MAX_START_WAIT_US = 250000

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
