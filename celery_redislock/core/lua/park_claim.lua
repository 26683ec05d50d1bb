-- park_claim.lua: a message carrying a promotion token reached a worker.
-- It turns its reservation into its lease only if the token matches the one
-- in flight for this task id; any other copy (duplicate, late copy of an
-- overdue promotion, already claimed) is dropped by the caller.
-- KEYS: the twelve keys of park_common.lua (KEYS[11], KEYS[12] only on a single server).
-- ARGV[1] name
-- ARGV[2] task_id
-- ARGV[3] token     promotion token from the message header
-- ARGV[4] owner     lease owner to add as holder
-- ARGV[5] ttl_ms    lease length
-- ARGV[6] meta      holder meta (JSON)
-- ARGV[7] limit     the run's limit, evaluated now
-- ARGV[8] task      its task name (kept with the entry if it goes back)
-- Returns {"held", fencing_token, due} | {"drop", reason, due} |
-- {"parked", 0, due} (the name is full for this task's own limit: its
-- reservation had lapsed, or the holders already there reach its limit; the
-- task goes back to its place at the head of the park list).

local id, token, owner = ARGV[2], ARGV[3], ARGV[4]
local ttl_ms, meta, limit = tonumber(ARGV[5]), ARGV[6], stored_limit(tonumber(ARGV[7]))

local entry = redis.call('HGET', INFLIGHT, id)
if not entry then return {'drop', 'not in flight', next_due(limit)} end
local f = split(entry, 8)
if f[1] ~= token then return {'drop', 'stale token', next_due(limit)} end

unreserve(id)
purge_expired_holders()
local state = holder_state()
-- Checked even with the reservation in hand: it was taken with the limit of
-- whoever promoted (another task name sharing the key, a limit changed since),
-- and no holder may share the name with more holders than its own limit allows.
if not admissible(state, limit) then
  park(id, tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), limit, ARGV[8], f[8])
  return {'parked', 0, next_due(limit)}
end
local fencing = add_holder(state, owner, ttl_ms, limit, meta)
fit_holder_ttl()
return {'held', fencing, next_due(limit)}
