--- @include "includes/lease_set_keys"
--- @include "includes/override_of"

-- The limit a caller's limit argument stands for: > 0 a semaphore's limit,
-- which the name's run-time override replaces when one is set; < 0 a fixed
-- limit, -raw (a lock: one holder, whatever an override says).  So an
-- operator can raise or lower a semaphore's limit without a deploy, and THE
-- INVARIANT (lease_set_keys.lua) holds with the limits as resolved here
-- (each holder stores its limit as passed, resolved where it is compared).
local function limit_of(raw)
  if raw < 0 then return -raw end
  local override = override_of(OVERRIDE).limit
  if override > 0 then return override end
  return raw
end
