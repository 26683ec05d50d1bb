--- @include "includes/lease_set_keys"

local function unindex_held()
  if HELD then redis.call('ZREM', HELD, string.match(HOLDERS, '{([^}]*)}')) end
end
