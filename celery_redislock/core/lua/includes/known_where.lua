--- @include "includes/park_keys"

-- Where task `id` already is: 'parked', 'inflight' (promoted, its message
-- on its way) or nil.  A call or a delivery of an id the park knows is a
-- duplicate (a second publish, a redelivery).
local function known_where(id)
  if redis.call('HEXISTS', PARKED, id) == 1 then return 'parked' end
  if redis.call('HEXISTS', INFLIGHT, id) == 1 then return 'inflight' end
  return nil
end
