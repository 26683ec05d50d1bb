--- @include "includes/override_of"

-- The rate a start is checked against: the name's run-time override (HASH
-- `override_key`) when one is set (then also for a start whose task has no
-- rate of its own), else the caller's.  A cost above an overriding burst
-- counts as the whole burst: it could never start otherwise.
local function rate_terms(override_key, interval, burst, cost)
  local o = override_of(override_key)
  if o.interval then
    interval, burst = o.interval, o.burst
    if cost > burst then cost = burst end
  end
  return interval, burst, cost
end
