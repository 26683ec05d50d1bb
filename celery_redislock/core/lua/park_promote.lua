-- park_promote.lua: fill every free slot of a name from its park list (after
-- a release, and from the sweeper).  Overdue in-flight reservations go back
-- to the head of the list first (to be re-published with a new token);
-- expired parked tasks are removed and reported, never published.
-- KEYS: the eleven keys of park_common.lua (KEYS[11] only on a single server).
-- ARGV[1] name
-- ARGV[2] limit        0: the limit last stored for the name
-- ARGV[3] deadline_ms  reservation deadline
-- ARGV[4] max          most promotions in this call (bounds the reply)
-- Returns {due, kind, id, token, envelope, ...}: kind "p" promoted (publish
-- the envelope with this token now), "x" expired (token 0).

local limit = stored_limit(tonumber(ARGV[2]))
local out = {0}
promote_parked(limit, tonumber(ARGV[3]), tonumber(ARGV[4]), out)
out[1] = next_due(limit)
return out
