--- @include "includes/now"
--- @include "includes/park_keys"

-- The holds on a name's parked work, read from PMETA once per script call
-- (HMGET hold lhold lhead) and kept here, so that a promotion and the due
-- time computed after it do not read them twice: PMETA hold (a debounced
-- name, park_call.lua), lhold (a listed limit, park_head.lua,
-- hold_for_limit.lua) and lhead "<ms>|<task id>" (the head park_head.lua
-- put back for the held limit's rate: it alone may go at its own time,
-- before lhold ends).  A script that writes these fields after they were
-- read sets the values below to what it wrote (hold_for_limit.lua,
-- park_unhold.lua).
local hold_until_ms  -- the later of hold and lhold (0: none); nil: not read yet
local debounce_until_ms, lhead_ms, lhead_id  -- hold, and lhead's parts (0, nil: none)
--- @per_call begin
hold_until_ms, debounce_until_ms, lhead_ms, lhead_id = nil, nil, nil, nil
--- @per_call end

-- How many ms parked entry `id` still waits for a hold (0: none), and
-- whether lhead sets its time, and `id` (nil: the park list's head, read
-- only when lhead may apply to it, and then returned).
local function parked_hold(id)
  if hold_until_ms == nil then
    local holds = redis.call('HMGET', PMETA, 'hold', 'lhold', 'lhead')
    debounce_until_ms = tonumber(holds[1] or '0')
    hold_until_ms = math.max(debounce_until_ms, tonumber(holds[2] or '0'))
    local ms, task_id = string.match(holds[3] or '', '^(%d+)|(.*)$')
    lhead_ms, lhead_id = tonumber(ms or '0'), task_id
  end
  local until_ms, by_head = hold_until_ms, false
  if lhead_ms > 0 and lhead_ms < hold_until_ms then
    if id == nil then id = redis.call('ZRANGE', PARK, 0, 0)[1] end
    by_head = id == lhead_id
    if by_head then until_ms = math.max(debounce_until_ms, lhead_ms) end
  end
  return math.max(until_ms - NOW_MS, 0), by_head, id
end
