-- release.lua: give back a slot or a place in the queue, and hand the freed
-- slot to the next live waiter(s), each admitted by its own limit (THE
-- INVARIANT of includes/lease_set_keys.lua; the releaser's limit plays no part): see
-- release_owner() in includes/release_owner.lua.
-- KEYS: the seven keys of includes/lease_set_keys.lua, and KEYS[8] HELD (optional; see
-- includes/lease_set_keys.lua: the waiters a release promotes are listed there, a name left
-- without holders leaves it).
-- ARGV[1] owner
-- ARGV[2] wake_ms    lifetime of a wake list this hand-off creates, and the
--                    longest wait lease (max_wait_ms of acquire.lua)
-- Returns 1 if `owner` held an unexpired slot (now released), else 0: the
-- lease had expired or been taken, or `owner` was only queued.

--- @include "includes/lease_set_keys"
--- @include "includes/release_owner"

HELD = KEYS[8]

return (release_owner(ARGV[1], tonumber(ARGV[2])))  -- its first value only
