-- park_unhold.lua: the wake-up of a name whose head waits for a listed
-- limit that has room now: lift the hold of its parked work for that limit
-- (PMETA lhold and lwait, set by park_head.lua for a run that the full
-- limit refused), if it is that limit's, and promote from its park list as
-- park_promote.lua does, at most ARGV[4] tasks (its caller passes 1: one
-- slot of the limit came back).  With ARGV[8] > 0, once it promoted one
-- (not an expired or unclaimed head, which it reports) and work is still
-- parked, the rest is held for the limit again for that long: the sweeper
-- does not promote it into a limit that would send it back; the name was
-- noted again behind the names waiting by the wake-up (limit_wake.lua,
-- limit_release.lua), or is noted by the caller (limit_block.lua), so the
-- next release of the limit that reaches it promotes one more.  A hold for
-- another limit stays (nothing is promoted then).
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server).
-- ARGV[1] name
-- ARGV[2] limit        as park_promote.lua's (0: the one last stored)
-- ARGV[3] deadline_ms  reservation deadline
-- ARGV[4] max          most promotions in this call
-- ARGV[5] task         "" (each parked task is admitted by its own limit)
-- ARGV[6] max_publishes  as park_promote.lua's
-- ARGV[7] limit        the listed limit that has room
-- ARGV[8] hold_ms      how long the rest is held for it again (0: not held)
-- ARGV[9] guard        as park_release.lua's ARGV[11] ("0": no state guard)
-- Returns {due, held_again, kind, id, token, envelope, guard, ...}: due and
-- the rest as park_promote.lua's; held_again 1 if the rest is held again.

--- @include "includes/next_due"
--- @include "includes/now"
--- @include "includes/park_keys"
--- @include "includes/parked_hold"
--- @include "includes/promote_parked"
--- @include "includes/stored_limit"

local meta = redis.call('HMGET', PMETA, 'lwait', 'limit')
local lifted = meta[1] == ARGV[7]
if lifted then redis.call('HDEL', PMETA, 'lhold', 'lwait', 'lhead') end
local limit = stored_limit(tonumber(ARGV[2]), meta[2])
local out = {0, 0}
local state, parked = promote_parked(limit, tonumber(ARGV[3]), tonumber(ARGV[4]), out, ARGV[5],
  tonumber(ARGV[6]), ARGV[9] ~= '0')
local hold_for = tonumber(ARGV[8])
if lifted and hold_for > 0 and (out[3] == 'p' or out[3] == 'r') then
  parked = redis.call('ZCARD', PARK) > 0
  if parked then
    local hold = NOW_MS + hold_for
    redis.call('HSET', PMETA, 'lhold', hold, 'lwait', ARGV[7])
    -- The promotion read the holds after the HDEL above (a promoted head
    -- passed parked_hold()): only lhold changed since.  Unread: next_due()
    -- reads them.
    if hold_until_ms ~= nil then hold_until_ms = math.max(debounce_until_ms, hold) end
    out[2] = 1
  end
end
out[1] = next_due(limit, state.n, parked)
return out
