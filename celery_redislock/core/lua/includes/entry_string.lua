--- @include "includes/park_keys"

-- The entry as stored, without its message: an entry that still carries
-- one (a new task's, from the caller's arguments) hands it to MSGS first.
-- Promotion reads and rewrites entries; a 2 KB string costs Lua about as
-- much as five commands each time it is made, so messages stay out of them.
local function entry_string(id, e)
  if e.envelope ~= '' then
    redis.call('HSET', MSGS, id, e.envelope)
    e.envelope = ''
  end
  return string.format('%d|%d|%d|%d|%d|%d|%d|%d|', e.seq, e.expires_ms, e.enqueued_ms, e.limit,
    e.publishes, e.interval, e.burst, e.cost) .. e.task .. '|'
end
