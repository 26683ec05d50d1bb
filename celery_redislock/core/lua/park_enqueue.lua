-- park_enqueue.lua: a park task's admission at publish.  The name is *full*
-- when no holder may join (reservations included; see admissible.lua: the
-- limits of every holder count), or anything is parked: then the task is
-- parked (FIFO, so no newcomer overtakes parked work).  It is parked too when
-- a slot is free but its rate (or a pause) does not admit it now; promotion
-- publishes it when it does.  Otherwise the slot and the rate's units are
-- taken together: the slot is reserved, and the caller publishes with the token.
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server).
-- ARGV[1] name
-- ARGV[2] task_id
-- ARGV[3] limit        the caller's limit; < 0 fixed (see includes/limit_of.lua)
-- ARGV[4] envelope     the message as stored for re-publishing (opaque JSON)
-- ARGV[5] expires_in   ms until the task expires (0: never)
-- ARGV[6] deadline_ms  how long a reservation waits for its message to arrive
-- ARGV[7] task         the task name (stored with the entry, see own_limit.lua)
-- ARGV[8] interval_us  the task's rate: microseconds per unit (0: no rate)
-- ARGV[9] burst        units that may start back to back
-- ARGV[10] cost        units this start takes (1 <= cost <= burst)
-- ARGV[11] options     "" (none) or a JSON object of the options of a call
--                      that parks (includes/park_call.lua): keep_latest,
--                      max_parked, max_total, debounce_ms, debounce_max_ms,
--                      supersede
-- Returns {"reserved", token, due} | {"parked", n_parked, rate_wait_ms,
-- replaced, guard, due} (rate_wait_ms > 0: a slot was free but the rate or a
-- pause admits it only then; replaced: the ids of the tasks it took out, with
-- keep_latest; guard: the holder of the task's state guard, taken for its
-- PARKED, or '', see includes/hold_state_guard.lua) | {"dup", where, due} (already parked or in flight:
-- idempotent) | {"bounded", n_parked, due} (the name's park at max_parked;
-- nothing stored) | {"bounded_total", n_total, due} (all names together at
-- max_total; nothing stored).  due: see next_due.lua (for the cluster index).

--- @include "includes/admit_new_call"
--- @include "includes/new_entry"
--- @include "includes/next_due"
--- @include "includes/outlive_grants"
--- @include "includes/reserve"
--- @include "includes/stored_limit"

local id, limit = ARGV[2], stored_limit(tonumber(ARGV[3]))
local entry = new_entry(limit, ARGV[4], tonumber(ARGV[5]), ARGV[7], tonumber(ARGV[8]),
  tonumber(ARGV[9]), tonumber(ARGV[10]))
local reply, state = admit_new_call(id, entry, limit, ARGV[11], false)
if reply then return reply end
local token = reserve(state, id, entry, tonumber(ARGV[6]))
outlive_grants()
return {'reserved', token, next_due(limit, state.n, false)}
