-- park_hold.lua: hold a name's parked work for a listed limit (PMETA lhold
-- and lwait, as park_head.lua sets them), if anything is parked, without a
-- release (Parking.hold_for: a tool's or a test's way to put a name in that
-- state; a run that makes way holds through its own release, with the hold
-- of park_release.lua).  park_unhold.lua lifts the hold when the limit wakes
-- the name.
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server).
-- ARGV[1] name
-- ARGV[2] hold_ms    hold this long at most (a hold only lengthens)
-- ARGV[3] waits_for  the listed limit
-- Returns {held, due}: held 1 if something is parked and now held for this
-- limit, else 0 (nothing parked, or a hold for another limit is on: it is
-- left alone, and the caller does not note the name);
-- due as next_due() (the hold's end when nothing else comes first).

--- @include "includes/hold_for_limit"
--- @include "includes/next_due"
--- @include "includes/stored_limit"

local held = hold_for_limit(ARGV[3], tonumber(ARGV[2]))
-- next_due() reads whether anything is parked: "not held" does not mean
-- "nothing parked" (a hold for another limit), and told "nothing parked" it
-- would drop the park's metadata and messages.
return {held, next_due(stored_limit(0))}
