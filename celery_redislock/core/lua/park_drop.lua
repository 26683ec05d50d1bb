-- park_drop.lua: take one task out of its name's parked work (revoke,
-- discard, a publish that failed, a revoked task met at promotion).  A
-- reservation it held is freed (the caller then runs park_promote.lua) and
-- its token remembered as stale, so a copy already published never runs.
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server).
-- ARGV[1] name
-- ARGV[2] task_id
-- ARGV[3] token    "" to drop whatever is stored; else only the in-flight
--                  entry with this token (a caller cancelling its own publish)
-- Returns {where, envelope, due}: where "parked", "inflight" or "" (not found).

--- @include "includes/message"
--- @include "includes/next_due"
--- @include "includes/park_keys"
--- @include "includes/read_entry"
--- @include "includes/read_inflight"
--- @include "includes/stored_limit"
--- @include "includes/supersede"
--- @include "includes/unpark"
--- @include "includes/unreserve"

local id, token = ARGV[2], ARGV[3]
local limit = stored_limit(0)
local entry = redis.call('HGET', PARKED, id)
if entry and token == '' then
  unpark(id)
  return {'parked', message(id, read_entry(entry), true), next_due(limit)}
end
entry = redis.call('HGET', INFLIGHT, id)
if entry then
  local e = read_inflight(entry)
  if token == '' or token == e.token then
    unreserve(id)
    supersede(id, e.token)
    return {'inflight', message(id, e, true), next_due(limit)}
  end
end
return {'', '', next_due(limit)}
