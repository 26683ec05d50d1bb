--- @include "includes/inflight_first"
--- @include "includes/lease_set_keys"
--- @include "includes/park_keys"
--- @include "includes/rsv"

local function unreserve(id)
  redis.call('ZREM', HOLDERS, rsv(id))
  redis.call('HDEL', INFO, rsv(id))
  redis.call('HDEL', INFLIGHT, id)
  inflight_first = nil
end
