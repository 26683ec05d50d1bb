--- @include "includes/admissible"
--- @include "includes/hold_state_guard"
--- @include "includes/holder_state"
--- @include "includes/limit_of"
--- @include "includes/message"
--- @include "includes/now"
--- @include "includes/outlive_grants"
--- @include "includes/own_limit"
--- @include "includes/park_keys"
--- @include "includes/purge_expired_holders"
--- @include "includes/rate_admits"
--- @include "includes/read_entry"
--- @include "includes/reclaim_overdue"
--- @include "includes/reserve"
--- @include "includes/unpark"

-- Fill every free slot of the name from its park list, at most `max`, each
-- task admitted by its own limit and its rate (FIFO: a head that its own limit,
-- rate or a pause does not admit yet stops the promotion; a later release or
-- sweep promotes it):
-- overdue reservations first go back to the head of the list.  Tasks that
-- will never run leave the list, reported, never published: expired ones,
-- and ones already published `max_publishes` times without a worker claiming
-- them (no worker consumes their queue or knows their task name; 0: no
-- bound).  Appends kind, id, token, envelope, guard per task to `out` (kind
-- "p": publish the envelope with this token now, guard for the first task
-- of the reply the holder of its state guard taken for its PROMOTED (see
-- hold_state_guard.lua), '' for the others; "r": the same, for a task
-- published before that no copy claimed within its deadline (or whose
-- publish failed); "x": expired, token 0; "u":
-- unclaimed, token = how often it was published; guard '' for both).  Returns the holder state
-- after it, and whether a task is left parked (nil: not known).  `guard`:
-- false when the caller's states reach nobody (no result backend, no
-- events: parking/states.py STATES_SEEN), so no guard is taken.
local function promote_parked(limit, deadline_ms, max, out, task, max_publishes, guard)
  purge_expired_holders()
  reclaim_overdue()
  local state = holder_state()
  local done, parked, reserved = 0, nil, false
  while done < max do
    local head = redis.call('ZRANGE', PARK, 0, 0)[1]
    parked = head ~= nil
    if not head then break end
    local e = read_entry(redis.call('HGET', PARKED, head))
    local own = own_limit(e.limit, e.task, limit, task or '')
    local expired = e.expires_ms > 0 and e.expires_ms <= NOW_MS
    local unclaimed = max_publishes > 0 and e.publishes >= max_publishes
    if not expired and not unclaimed then
      -- The slot and the rate together: both are taken, or neither.
      if not admissible(state, limit_of(own)) or not rate_admits(e, true, true, head) then break end
    end
    unpark(head)
    local reply
    if expired then
      reply = {'x', head, 0, message(head, e, true), ''}
    elseif unclaimed then
      reply = {'u', head, e.publishes, message(head, e, true), ''}
    else
      e.limit = own
      local again = e.publishes > 0
      local envelope = message(head, e, false)
      local token = reserve(state, head, e, deadline_ms)
      -- The first task of the reply only: its caller writes its PROMOTED at
      -- once, while the decision made here still holds; a later one is
      -- written after those before it (their writes and publishes), when its
      -- task may have left flight, so that write checks it under the guard.
      local holder = ''
      if done == 0 and guard then holder = hold_state_guard(head, string.format('p%d', token)) end
      reply = {again and 'r' or 'p', head, token, envelope, holder}
      reserved = true
    end
    for _, v in ipairs(reply) do out[#out + 1] = v end
    done = done + 1
    parked = nil  -- the head was taken: whether another is left is not known
  end
  if reserved then outlive_grants() end  -- a removal only shortens what they must outlive
  return state, parked
end
