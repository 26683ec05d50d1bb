-- park_try.lua: a run of a policy that does not park, on a key with a rate
-- (or beside park-policy tasks of the same key): the slot and the rate's
-- units together, or nothing; never parks.
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server).
-- ARGV[1] name
-- ARGV[2] limit        the run's limit, evaluated now; < 0 fixed
-- ARGV[3] owner        lease owner to add as holder
-- ARGV[4] ttl_ms       lease length
-- ARGV[5] meta         holder meta (JSON)
-- ARGV[6] interval_us  the task's rate: microseconds per unit (0: no rate)
-- ARGV[7] burst        units that may start back to back
-- ARGV[8] cost         units this start takes
-- Returns {"held", fencing_token, start_wait_us, due} | {"full", 0, due} (no
-- slot, or work is parked) | {"rate", wait_ms, due} (the rate or a pause
-- admits it in wait_ms).

--- @include "includes/add_holder"
--- @include "includes/new_entry"
--- @include "includes/next_due"
--- @include "includes/outlive_grants"
--- @include "includes/park_keys"
--- @include "includes/purge_expired_holders"
--- @include "includes/rate_admits"
--- @include "includes/reclaim_overdue"
--- @include "includes/room_now"
--- @include "includes/stored_limit"

local limit = stored_limit(tonumber(ARGV[2]))
purge_expired_holders()
reclaim_overdue()
local entry = new_entry(limit, '', 0, '', tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]))
local n_parked = redis.call('ZCARD', PARK)
local state, slot, admitted, wait_us, start_us = room_now(entry, limit, n_parked, 0, true)
if not slot then return {'full', 0, next_due(limit, state.n, n_parked > 0)} end
if not admitted then
  return {'rate', math.ceil(wait_us / 1000), next_due(limit, state.n, n_parked > 0)}
end
rate_admits(entry, true)  -- admitted just above: takes the units with the slot
local token = add_holder(state, ARGV[3], tonumber(ARGV[4]), limit, ARGV[5])
outlive_grants()
return {'held', token, start_us, next_due(limit, state.n, false)}
