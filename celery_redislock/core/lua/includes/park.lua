--- @include "includes/entry_string"
--- @include "includes/park_keys"

-- park() and unpark() are the only writers of PARK, so TOTAL follows every
-- change of it (counted by what ZADD / ZREM did, so a repeat cannot drift it);
-- at zero the key is deleted, so nothing is left once no task is parked.
local function park(id, e)
  if redis.call('ZADD', PARK, e.seq, id) == 1 and TOTAL then redis.call('INCR', TOTAL) end
  redis.call('HSET', PARKED, id, entry_string(id, e))
end
