--- @include "includes/admissible"
--- @include "includes/holder_state"
--- @include "includes/limit_of"
--- @include "includes/rate_admits"
--- @include "includes/start_delay"
--- @include "includes/start_wait"

-- Whether a call of entry `e` may start now, nothing taken: a slot free by
-- its own `limit` (THE INVARIANT) with nothing parked (`n_parked`: no
-- newcomer overtakes parked work) and no debounce, then its rate and any
-- pause; and for a run (`starts`: a worker holds it, not a publish), a wait
-- before its body starts of at most MAX_START_WAIT_US.  Returns the holder
-- state, whether a slot is free, whether the call is admitted, and the
-- waits (us) until its rate admits it and before its body starts.
local function room_now(e, limit, n_parked, debounce_ms, starts)
  local state = holder_state()
  local slot = debounce_ms == 0 and n_parked == 0 and admissible(state, limit_of(limit))
  local admitted, wait_us, start_us = false, 0, 0
  if slot then admitted, wait_us = rate_admits(e, false) end
  if admitted and starts then
    start_us = start_wait(e)
    if start_us > MAX_START_WAIT_US then admitted, wait_us = false, start_us end
  end
  return state, slot, admitted, wait_us, start_us
end
