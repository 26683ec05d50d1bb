-- park_promote.lua: fill every free slot of a name from its park list (after
-- a release, and from the sweeper).  Overdue in-flight reservations go back
-- to the head of the list first (to be re-published with a new token);
-- expired parked tasks are removed and reported, never published.
-- KEYS: the eleven keys of park_common.lua (KEYS[11] only on a single server).
-- ARGV[1] name
-- ARGV[2] limit        0: the limit last stored for the name
-- ARGV[3] deadline_ms  reservation deadline
-- ARGV[4] max          most promotions in this call (bounds the reply)
-- Returns {due, kind, id, token, envelope, ...}: kind "p" promoted (publish
-- the envelope with this token now), "x" expired (token 0).

local limit, deadline_ms, max = stored_limit(tonumber(ARGV[2])), tonumber(ARGV[3]), tonumber(ARGV[4])
purge_expired_holders()
reclaim_overdue()
local out = {0}
local state = holder_state()
local done = 0
while done < max and admissible(state, limit) do
  local head = redis.call('ZRANGE', PARK, 0, 0)[1]
  if not head then break end
  local f = split(redis.call('HGET', PARKED, head) or '0|0|0|', 4)
  unpark(head)
  local expires_ms = tonumber(f[2])
  if expires_ms > 0 and expires_ms <= NOW_MS then
    for _, v in ipairs({'x', head, 0, f[4]}) do out[#out + 1] = v end
  else
    local token = reserve(state, head, tonumber(f[1]), expires_ms, tonumber(f[3]), f[4],
      deadline_ms, limit)
    for _, v in ipairs({'p', head, token, f[4]}) do out[#out + 1] = v end
  end
  done = done + 1
end
fit_holder_ttl()
out[1] = next_due(limit)
return out
