-- limit_wake.lua: wake the first name whose parked head waits for this
-- listed limit (see wake_first() in includes/wake_first.lua), for the
-- caller to promote one of its tasks (park_unhold.lua); after a slot of
-- the limit came back by other means than limit_release.lua (a refused
-- run's give-back, a dead child's clean-up, the dead-holder path), or when
-- the limit had room for one more.
-- KEYS: the seven keys of includes/lease_set_keys.lua (the listed limit's),
-- and KEYS[8] blocked, KEYS[9] limits and KEYS[10] turns (limit_block.lua's).
-- ARGV[1] the name not to wake ("" none): a run that gives this limit back
--         because another refused it, whose own name goes back to wait
-- ARGV[2] in_flight  slots of the limit to count as taken besides its
--                    holders (tasks the caller promoted for it already)
-- ARGV[3] ttl_ms     as limit_block.lua's ARGV[3], for a name noted again
-- Returns wake_first()'s reply: {name, asks, holds, room} or {}.

--- @include "includes/wake_first"

return wake_first(KEYS[8], KEYS[9], KEYS[10], ARGV[1], tonumber(ARGV[2]), ARGV[3])
