--- @include "includes/add_holder"
--- @include "includes/entry_string"
--- @include "includes/inflight_first"
--- @include "includes/now"
--- @include "includes/park_keys"
--- @include "includes/rsv"

-- Reserve a slot for task `id` (entry `e`, which counts this publish) until
-- NOW + deadline_ms, as a holder entry with the task's own limit e.limit (the
-- caller checked admissible(state, limit_of(e.limit)), see includes/admissible.lua); returns the
-- promotion token (a fencing token of the name, so unique and increasing).
local function reserve(state, id, e, deadline_ms)
  local meta = cjson.encode({reserved = true, task_id = id})
  local token = add_holder(state, rsv(id), deadline_ms, e.limit, meta)
  local deadline = NOW_MS + deadline_ms
  e.publishes = e.publishes + 1
  redis.call('HSET', INFLIGHT, id, string.format('%d|%d|', token, deadline) .. entry_string(id, e))
  if inflight_first ~= nil then
    inflight_first = inflight_first and math.min(inflight_first, deadline) or deadline
  end
  return token
end
