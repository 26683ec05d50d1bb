--- @include "includes/lease_set_keys"
--- @include "includes/now"

-- Make the holder keys outlive every lease or reservation this call granted
-- (add_holder() notes the latest end in `granted_until`).  They are
-- extended only when a grant would outlive them, and then with up to
-- GRANT_SLACK_MS to spare, so that on a busy name most grants cost one
-- PTTL, not fit_holder_ttl()'s ZRANGE and two PEXPIREs.  So the keys may
-- outlive their last lease by GRANT_SLACK_MS at most (every reader judges a
-- holder by its score, not by the key); they never expire before it.
-- Only after grants: a removal only shortens what the keys must outlive.
-- INFO cannot be left without a TTL here: a grant finds no INFO only when
-- no holder is left (a holder whose entry is lost counts as a lock holder,
-- entry_limit(), and refuses every newcomer), so HOLDERS is new too.
local GRANT_SLACK_MS = 5000
local granted_until
--- @per_call begin
granted_until = nil
--- @per_call end
local function outlive_grants()
  if not granted_until then return end
  local needed = granted_until - NOW_MS
  if redis.call('PTTL', HOLDERS) >= needed then return end
  local ms = needed + math.min(math.floor(needed / 2), GRANT_SLACK_MS)
  redis.call('PEXPIRE', HOLDERS, ms)
  redis.call('PEXPIRE', INFO, ms)
end
