--- @include "includes/gcra"
--- @include "includes/lease_set_keys"
--- @include "includes/now"
--- @include "includes/park_keys"
--- @include "includes/pause_left_us"
--- @include "includes/rate_terms"

-- Whether the name's rate (and pause) admits entry `e` now; with `take`,
-- its units are taken when it does.  Parked work also waits for a debounced
-- name's hold and a listed limit's (PMETA hold, lhold: park_call.lua,
-- park_head.lua).  Returns admitted and, if not, the
-- microseconds until it would be.  An entry without a rate only waits
-- for a pause.  `parked`: `e` is parked work (promotion), whose schedule may
-- be kept SCHEDULE_LAG_US (at most half an interval) behind (see gcra()), so
-- a backlog keeps its rate when a promotion runs a little after its due time
-- (a sweeper's wake-up); an arriving start has none.
local hold_ms  -- the later of PMETA's holds, read once per script call (0: none)
local function rate_admits(e, take, parked)
  if parked then
    if hold_ms == nil then
      local holds = redis.call('HMGET', PMETA, 'hold', 'lhold')
      hold_ms = math.max(tonumber(holds[1] or '0'), tonumber(holds[2] or '0'))
    end
    if hold_ms > NOW_MS then return false, (hold_ms - NOW_MS) * 1000 end
  end
  local interval, burst, cost = rate_terms(OVERRIDE, e.interval, e.burst, e.cost)
  if interval > 0 then
    local lag = 0
    if parked then lag = math.min(math.floor(interval / 2), SCHEDULE_LAG_US) end
    return gcra(RATE, PAUSE, NOW_US, interval, burst, cost, take, lag)
  end
  local paused = pause_left_us(PAUSE)
  if paused > 0 then return false, paused end
  return true, 0
end
