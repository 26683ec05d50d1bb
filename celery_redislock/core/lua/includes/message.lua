--- @include "includes/park_keys"

-- The stored message of task `id` (entry `e`), to hand out; with `forget`
-- the task leaves the park for good (it runs, or is dropped), so its
-- message goes too.
local function message(id, e, forget)
  local envelope = e.envelope
  if envelope == '' then envelope = redis.call('HGET', MSGS, id) or '' end
  if forget then redis.call('HDEL', MSGS, id) end
  return envelope
end
