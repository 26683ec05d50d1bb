--- @include "includes/park_keys"

-- Take task `id`'s state guard (state_hold.lua's KEYS[1]: <base>:state:<id>,
-- derived from PARK, same hash tag) for `holder`, so that the state this call
-- decided (PARKED: park_call(); PROMOTED: promote_parked()) is written under
-- it without another round trip; the caller gives it back with
-- state_free.lua.  Returns `holder`, or '' when another write of the task
-- holds the guard (the caller then waits for it with state_hold.lua, as
-- any write does).  Holders taken here are a letter and a number that no
-- other write of the task's state shares ('k' .. Redis time in
-- microseconds when it parks: a task id is parked at most once per call;
-- 'p' .. the promotion token, unique in the name), never one of
-- parking/states.py's, which are hex.
local STATE_GUARD_TTL_MS = 5000  -- parking/states.py GUARD_TTL
local function hold_state_guard(id, holder)
  local guard = string.sub(PARK, 1, -5) .. 'state:' .. id
  if redis.call('SET', guard, holder, 'NX', 'PX', STATE_GUARD_TTL_MS) then return holder end
  return ''
end
