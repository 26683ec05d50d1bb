--- @include "includes/park_keys"

-- The limit argument a call works with: its own, else (0: the sweeper, a
-- drop) the last one stored (`read`: PMETA limit as the caller read it,
-- false if absent; nil: read here).  next_due() stores it while the name
-- has parked or in-flight work, and deletes PMETA when it has none.  Limits
-- are kept as passed (< 0: fixed, see limit_of() in includes/limit_of.lua)
-- and resolved where they are compared, so an override applies to work
-- parked before it was set.
local function stored_limit(limit, read)
  if limit and limit ~= 0 then return limit end
  if read == nil then read = redis.call('HGET', PMETA, 'limit') end
  return tonumber(read or '1')
end
