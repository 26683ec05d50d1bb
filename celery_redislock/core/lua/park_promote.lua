-- park_promote.lua: fill every free slot of a name from its park list (after
-- a release, and from the sweeper).  Overdue in-flight reservations go back
-- to the head of the list first (to be re-published with a new token);
-- expired parked tasks are removed and reported, never published.
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server).
-- ARGV[1] name
-- ARGV[2] limit        the caller's limit, for the name's due time and as the
--                      limit stored (0: the one last stored); each parked task
--                      is admitted by its own limit
-- ARGV[3] deadline_ms  reservation deadline
-- ARGV[4] max          most promotions in this call (bounds the reply)
-- ARGV[5] task         the caller's task name ("": none, the sweeper)
-- ARGV[6] max_publishes  how often a task is published before it is given up
--                      as unclaimed (0: no bound; see promote_parked())
-- ARGV[7] guard        as park_release.lua's ARGV[11] ("0": no state guard)
-- Returns {due, kind, id, token, envelope, guard, ...}: kind "p" promoted
-- (publish the envelope with this token now; guard: the holder of its state
-- guard, or ''), "r" the same for a task published before that no copy
-- claimed, "x" expired (token 0), "u" unclaimed (token: how often it was
-- published); see promote_parked().

--- @include "includes/next_due"
--- @include "includes/promote_parked"
--- @include "includes/stored_limit"

local limit = stored_limit(tonumber(ARGV[2]))
local out = {0}
local state, parked = promote_parked(limit, tonumber(ARGV[3]), tonumber(ARGV[4]), out, ARGV[5],
  tonumber(ARGV[6]), ARGV[7] ~= '0')
out[1] = next_due(limit, state.n, parked)
return out
