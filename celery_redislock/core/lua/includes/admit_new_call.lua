--- @include "includes/known_where"
--- @include "includes/next_due"
--- @include "includes/park_call"
--- @include "includes/park_keys"
--- @include "includes/purge_expired_holders"
--- @include "includes/rate_admits"
--- @include "includes/reclaim_overdue"
--- @include "includes/room_now"

-- The admission of a new call of task `id`, entry `entry` (new_entry.lua),
-- by park_enqueue.lua at publish and park_arrive.lua for a run whose message
-- carried no reservation (`starts`); `options`: the call's packed JSON
-- options, "" for none.  A call already parked or in flight, or one that
-- finds no room now, ends here: the reply to return (see park_enqueue.lua).
-- An admitted call has its rate's units taken, and gets nil, the holder
-- state (its slot to take) and the wait before its body starts (`starts`
-- only).
local function admit_new_call(id, entry, limit, options, starts)
  local known = known_where(id)
  if known then return {'dup', known, next_due(limit)} end
  local opts = options ~= '' and cjson.decode(options) or {}
  purge_expired_holders()
  reclaim_overdue()
  local n_parked = redis.call('ZCARD', PARK)
  local state, slot, admitted, wait_us, start_us =
    room_now(entry, limit, n_parked, opts.debounce_ms or 0, starts)
  if not admitted then
    return park_call(id, entry, n_parked, slot, wait_us, state.n, limit, opts)
  end
  rate_admits(entry, true)  -- admitted just above: takes the units with the slot
  return nil, state, start_us
end
