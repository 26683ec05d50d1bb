-- park_unhold.lua: lift the hold of a name's parked work for a listed limit
-- (PMETA lhold and lwait, set by park_head.lua for a run that the full
-- limit refused), if it is that limit's, and promote from its park list as
-- park_promote.lua does, at most ARGV[4] tasks (its caller passes 1: one
-- slot of the limit came back): the wake-up of a name whose head waits for
-- a listed limit that has room now.  A hold for another limit stays
-- (nothing is promoted then).
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server).
-- ARGV[1] name
-- ARGV[2] limit        as park_promote.lua's (0: the one last stored)
-- ARGV[3] deadline_ms  reservation deadline
-- ARGV[4] max          most promotions in this call
-- ARGV[5] task         "" (each parked task is admitted by its own limit)
-- ARGV[6] max_publishes  as park_promote.lua's
-- ARGV[7] limit        the listed limit that has room
-- Returns as park_promote.lua: {due, kind, id, token, envelope, guard, ...}.

--- @include "includes/next_due"
--- @include "includes/park_keys"
--- @include "includes/promote_parked"
--- @include "includes/stored_limit"

if redis.call('HGET', PMETA, 'lwait') == ARGV[7] then redis.call('HDEL', PMETA, 'lhold', 'lwait') end
local limit = stored_limit(tonumber(ARGV[2]))
local out = {0}
local state, parked = promote_parked(limit, tonumber(ARGV[3]), tonumber(ARGV[4]), out, ARGV[5],
  tonumber(ARGV[6]))
out[1] = next_due(limit, state.n, parked)
return out
