-- park_claim.lua: a message carrying a promotion token reached a worker.
-- It turns its reservation into its lease only if the token matches the one
-- in flight for this task id; any other copy (duplicate, late copy of an
-- overdue promotion, already claimed) is dropped by the caller.
-- KEYS: the eleven keys of park_common.lua (KEYS[11] only on a single server).
-- ARGV[1] name
-- ARGV[2] task_id
-- ARGV[3] token     promotion token from the message header
-- ARGV[4] owner     lease owner to add as holder
-- ARGV[5] ttl_ms    lease length
-- ARGV[6] meta      holder meta (JSON)
-- ARGV[7] limit
-- Returns {"held", fencing_token, due} | {"drop", reason, due} |
-- {"parked", 0, due} (the reservation had lapsed and the name is full: the
-- task goes back to the head of the park list).

local id, token, owner = ARGV[2], ARGV[3], ARGV[4]
local ttl_ms, meta, limit = tonumber(ARGV[5]), ARGV[6], stored_limit(tonumber(ARGV[7]))

local entry = redis.call('HGET', INFLIGHT, id)
if not entry then return {'drop', 'not in flight', next_due(limit)} end
local f = split(entry, 6)
if f[1] ~= token then return {'drop', 'stale token', next_due(limit)} end

local reserved = redis.call('ZSCORE', HOLDERS, rsv(id))
unreserve(id)
purge_expired_holders()
local state = holder_state()
if not reserved and not admissible(state, limit) then
  park(id, tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), f[6])
  return {'parked', 0, next_due(limit)}
end
local fencing = add_holder(state, owner, ttl_ms, limit, meta)
fit_holder_ttl()
return {'held', fencing, next_due(limit)}
