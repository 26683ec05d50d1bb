--- @include "includes/gcra"
--- @include "includes/lease_set_keys"
--- @include "includes/now"
--- @include "includes/park_keys"
--- @include "includes/parked_hold"
--- @include "includes/pause_left_us"
--- @include "includes/rate_terms"

-- Whether the name's rate (and pause) admits entry `e` now; with `take`,
-- its units are taken when it does.  Parked work also waits for a debounced
-- name's hold and a listed limit's (PMETA hold, lhold: park_call.lua,
-- park_head.lua), except that the head park_head.lua put back for the held
-- limit's rate goes alone, first in the park, at its time (PMETA lhead
-- "<ms>|<task id>"; `id` the entry's task id); the promotion that takes
-- it clears lhead.  Returns admitted and, if not, the
-- microseconds until it would be.  An entry without a rate only waits
-- for a pause.  `parked`: `e` is parked work (promotion), whose schedule may
-- be kept SCHEDULE_LAG_US (at most half an interval) behind (see gcra()), so
-- a backlog keeps its rate when a promotion runs a little after its due time
-- (a sweeper's wake-up); an arriving start has none.
local function rate_admits(e, take, parked, id)
  local by_head = false
  if parked then
    local held_ms
    held_ms, by_head = parked_hold(id)
    if held_ms > 0 then return false, held_ms * 1000 end
  end
  local admitted, wait_us = true, 0
  local interval, burst, cost = rate_terms(OVERRIDE, e.interval, e.burst, e.cost)
  if interval > 0 then
    local lag = 0
    if parked then lag = math.min(math.floor(interval / 2), SCHEDULE_LAG_US) end
    admitted, wait_us = gcra(RATE, PAUSE, NOW_US, interval, burst, cost, take, lag)
  else
    local paused = pause_left_us(PAUSE)
    if paused > 0 then admitted, wait_us = false, paused end
  end
  if admitted and take and by_head then
    redis.call('HDEL', PMETA, 'lhead')
    lhead_ms = 0
  end
  return admitted, wait_us
end
