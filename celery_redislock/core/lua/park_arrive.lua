-- park_arrive.lua: a message of a park task without a reservation reached a
-- worker (published before the task's key was parked, or re-sent by Celery):
-- the same admission as park_enqueue.lua, and an admitted run takes the slot
-- as its lease.
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server),
-- and KEYS[20] revoked (optional: the task's revoke record, passed on a single server only).
-- ARGV[1] name
-- ARGV[2] task_id
-- ARGV[3] limit        the run's limit, evaluated now; < 0 fixed
-- ARGV[4] envelope     the message as stored for re-publishing (opaque JSON)
-- ARGV[5] expires_in   ms until the task expires (0: never)
-- ARGV[6] owner        lease owner to add as holder
-- ARGV[7] ttl_ms       lease length
-- ARGV[8] meta         holder meta (JSON)
-- ARGV[9] task         the task name (stored with the entry if it parks)
-- ARGV[10] interval_us the task's rate: microseconds per unit (0: no rate)
-- ARGV[11] burst       units that may start back to back
-- ARGV[12] cost        units this start takes
-- ARGV[13] options     as park_enqueue.lua's ARGV[11]
-- ARGV[14] mark        this copy's mark (parking/message.py copy_token: the
--                      machine and process that run it): a stale fate left
--                      under it by an earlier run of the task in this
--                      process (park_head.lua) is dropped, so a crash of
--                      this run is not read as that one's
-- Returns {"held", fencing_token, start_wait_us, due} (start_wait_us: see
-- park_claim.lua), park_claim.lua's "revoked", or park_enqueue.lua's
-- replies but "reserved".

--- @include "includes/add_holder"
--- @include "includes/admit_new_call"
--- @include "includes/new_entry"
--- @include "includes/next_due"
--- @include "includes/outlive_grants"
--- @include "includes/park_keys"
--- @include "includes/stored_limit"

-- Revoked through Redis (parking/admin.py revoke, or a worker that
-- discarded it): nothing is taken, the caller drops it.
if REVOKE_RECORD and redis.call('EXISTS', REVOKE_RECORD) == 1 then return {'revoked', 0, -2} end
local id, limit = ARGV[2], stored_limit(tonumber(ARGV[3]))
redis.call('ZREM', TOKENS, 's|' .. id .. '|' .. ARGV[14])
local entry = new_entry(limit, ARGV[4], tonumber(ARGV[5]), ARGV[9], tonumber(ARGV[10]),
  tonumber(ARGV[11]), tonumber(ARGV[12]))
local reply, state, start_us = admit_new_call(id, entry, limit, ARGV[13], true)
if reply then return reply end
local token = add_holder(state, ARGV[6], tonumber(ARGV[7]), limit, ARGV[8])
outlive_grants()
return {'held', token, start_us, next_due(limit, state.n, false)}
