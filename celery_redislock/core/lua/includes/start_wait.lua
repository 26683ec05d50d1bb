--- @include "includes/lease_set_keys"
--- @include "includes/now"
--- @include "includes/park_keys"
--- @include "includes/rate_terms"
--- @include "includes/start_delay"

-- How long a run of entry `e` admitted now waits before its body starts (us;
-- 0 without a rate), recorded in the start schedule when at most
-- MAX_START_WAIT_US; a longer wait is returned without recording it.
local function start_wait(e)
  local interval, burst, cost = rate_terms(OVERRIDE, e.interval, e.burst, e.cost)
  if interval <= 0 then return 0 end
  return start_delay(STARTED, NOW_US, interval, burst, cost, MAX_START_WAIT_US)
end
