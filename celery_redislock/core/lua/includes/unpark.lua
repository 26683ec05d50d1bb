--- @include "includes/park_keys"

local function unpark(id)
  if redis.call('ZREM', PARK, id) == 1 and TOTAL and redis.call('DECR', TOTAL) <= 0 then
    redis.call('DEL', TOTAL)
  end
  redis.call('HDEL', PARKED, id)
end
