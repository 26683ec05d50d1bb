-- park_claim.lua: a message carrying a promotion token reached a worker.
-- While its task id is in flight, the first copy to arrive claims the
-- reservation and turns it into its lease, whichever promotion it came
-- from: an earlier promotion's copy that waited in a busy queue past its
-- deadline is the same task, and the newer token then becomes stale.  So a
-- queue slower than the reservation deadline delays a task, never starves it.
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server),
-- and KEYS[20] revoked (optional: the task's revoke record, passed on a single server only).
-- ARGV[1] name
-- ARGV[2] task_id
-- ARGV[3] token     promotion token from the message header
-- ARGV[4] owner     lease owner to add as holder
-- ARGV[5] ttl_ms    lease length
-- ARGV[6] meta      holder meta (JSON)
-- ARGV[7] limit     the run's limit, evaluated now (< 0: fixed, see limit_of())
-- ARGV[8] task      its task name (kept with the entry if it goes back)
-- Returns {"held", fencing_token, start_wait_us, due} (start_wait_us: how long
-- the run waits before its body starts, so that starts keep the rate; see
-- start_wait()) | {"parked", 0, due} (the name is full for this task's own
-- limit: its reservation had lapsed, or the holders already there reach its
-- limit, or the name is paused, or its start would wait longer than
-- MAX_START_WAIT_US; the task goes back to its place at the head of the park
-- list) | {"drop", fate, due} for a token no longer in flight,
-- fate "stale" (superseded: that copy never runs), "claimed" (a copy of a
-- claimed promotion: a duplicate, or the broker giving the message back after
-- the delivery that claimed it died; the caller tells them apart by the
-- redelivered flag) or "unknown" (the lock Redis lost its data: the caller
-- admits it as a message without a token, so it runs: at least once, as
-- Celery delivers) | {"revoked", 0, -2} (the task's revoke record exists:
-- nothing is taken; due -2 as park_release.lua's: the index is left alone).

--- @include "includes/add_holder"
--- @include "includes/admissible"
--- @include "includes/fate_of"
--- @include "includes/holder_state"
--- @include "includes/limit_of"
--- @include "includes/next_due"
--- @include "includes/outlive_grants"
--- @include "includes/park"
--- @include "includes/park_keys"
--- @include "includes/pause_left_us"
--- @include "includes/purge_expired_holders"
--- @include "includes/read_inflight"
--- @include "includes/start_delay"
--- @include "includes/start_wait"
--- @include "includes/stored_limit"
--- @include "includes/supersede"
--- @include "includes/token_fate"
--- @include "includes/unreserve"

-- Revoked through Redis (parking/admin.py revoke, or a worker that
-- discarded it): nothing is taken, the caller drops it.
if REVOKE_RECORD and redis.call('EXISTS', REVOKE_RECORD) == 1 then return {'revoked', 0, -2} end
local id, token, owner = ARGV[2], ARGV[3], ARGV[4]
local ttl_ms, meta, limit = tonumber(ARGV[5]), ARGV[6], stored_limit(tonumber(ARGV[7]))

local entry = redis.call('HGET', INFLIGHT, id)
if not entry then return {'drop', fate_of(id, token), next_due(limit)} end
local e = read_inflight(entry)
unreserve(id)
if e.token ~= token then
  supersede(id, e.token)
  redis.call('ZREM', TOKENS, 's|' .. id .. '|' .. token)  -- this copy is the task now
end
purge_expired_holders()
local state = holder_state()
-- Checked even with the reservation in hand: it was taken with the limit of
-- whoever promoted (another task name sharing the key, a limit changed since),
-- and no holder may share the name with more holders than its own limit allows.
-- A pause that began after the promotion holds it too: nothing of the key
-- starts before the pause ends.
local wait_us = MAX_START_WAIT_US + 1
if admissible(state, limit_of(limit)) and pause_left_us(PAUSE) == 0 then
  wait_us = start_wait(e)
end
if wait_us > MAX_START_WAIT_US then
  supersede(id, token)  -- it gets a new token when promoted again
  -- A worker consumed it: only publishes no copy claimed count toward
  -- max_publishes (promote_parked.lua's "u", "r").
  e.limit, e.task, e.publishes = limit, ARGV[8], 0
  park(id, e)
  return {'parked', 0, next_due(limit, state.n, true)}
end
token_fate('c', id, token)
redis.call('HDEL', MSGS, id)  -- it runs: its message is not needed again
-- Its reservation listed the name in HELD until its deadline (reserve()).
local fencing = add_holder(state, owner, ttl_ms, limit, meta, e.deadline_ms)
outlive_grants()
return {'held', fencing, wait_us, next_due(limit, state.n)}
