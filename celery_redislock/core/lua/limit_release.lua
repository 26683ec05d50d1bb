-- limit_release.lua: a run gives its slot of a listed limit back (as
-- release.lua), and the first name whose parked head waits for the limit
-- is woken (as limit_wake.lua), in one call: the end of a run costs one
-- round trip per listed limit.
-- KEYS: the seven keys of includes/lease_set_keys.lua (the listed limit's),
-- and KEYS[8] blocked, KEYS[9] limits and KEYS[10] turns (limit_block.lua's),
-- and KEYS[11] HELD (optional; release.lua's KEYS[8]).
-- ARGV[1] owner
-- ARGV[2] wake_ms    as release.lua's ARGV[2]
-- ARGV[3] ttl_ms     as limit_wake.lua's ARGV[2]
-- Returns {held, at, name, asks, holds, room} or {held, at}: held as
-- release.lua's reply; at the Redis time of this call (us), when a name
-- woken here was noted again (limit_block.lua's ARGV[6] for the name of
-- the run that made way); the rest as limit_wake.lua's (nobody woken: none).

--- @include "includes/lease_set_keys"
--- @include "includes/now"
--- @include "includes/release_owner"
--- @include "includes/wake_first"

HELD = KEYS[11]

local held, queued = release_owner(ARGV[1], tonumber(ARGV[2]))
local reply = wake_first(KEYS[8], KEYS[9], KEYS[10], '', 0, ARGV[3], queued)
table.insert(reply, 1, NOW_US)
table.insert(reply, 1, held)
return reply
