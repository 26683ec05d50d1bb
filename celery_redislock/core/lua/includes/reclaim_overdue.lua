--- @include "includes/inflight_deadline"
--- @include "includes/inflight_first"
--- @include "includes/now"
--- @include "includes/park"
--- @include "includes/park_keys"
--- @include "includes/read_inflight"
--- @include "includes/supersede"
--- @include "includes/unreserve"

-- In-flight reservations past their deadline go back to the head of the
-- park list (their original sequence number), so they are re-published with a
-- new token; the old token is remembered as stale, so a copy of the old
-- message that the broker gives back after the new one ran is dropped.
-- Once per script call (NOW_MS does not move; reservations made since end
-- after it).  Leaves inflight_first known.
local reclaimed
--- @per_call begin
reclaimed = false
--- @per_call end
local function reclaim_overdue()
  if reclaimed then return 0 end
  reclaimed = true
  local raw = redis.call('HGETALL', INFLIGHT)
  local n, first = 0, false
  for i = 1, #raw, 2 do
    local deadline = inflight_deadline(raw[i + 1])
    if deadline <= NOW_MS then
      local e = read_inflight(raw[i + 1])
      unreserve(raw[i])
      supersede(raw[i], e.token)
      park(raw[i], e)
      n = n + 1
    elseif not first or deadline < first then
      first = deadline
    end
  end
  inflight_first = first
  return n
end
