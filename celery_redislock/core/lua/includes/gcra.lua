-- includes/gcra.lua: GCRA (the generic cell rate algorithm) over one key per
-- name, and the name's pause; the rate's helpers (rate_terms, start_delay,
-- extend_pause, pause_left_us) live beside it, one per file.
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

--- @include "includes/pause_left_us"



-- How far behind a parked backlog's schedule may be kept (see gcra()); the
-- rate key outlives its TAT by as much, so a late promotion still reads it.
local SCHEDULE_LAG_US = 5000

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
