-- dedupe.lua: the enqueue-time de-duplication marker of one lock name
-- (at most one queued-or-running message per key, the celery-once use case).
-- Standalone (no common.lua).  The key shares the lock's hash tag.
-- KEYS[1] marker   STRING  <prefix>:{<name>}:enqueued:<task name> -> task id of the message
--                  (or :throttle:<task name>, the window of lock_throttle without trailing,
--                  claimed with ttl = the window and never cleared)
-- ARGV[1] op       "claim": take the marker for ARGV[2] unless another task id
--                  holds it; the holder itself (a retry or requeue re-publishing
--                  the same id) re-claims and refreshes it.
--                  "clear": delete the marker if ARGV[2] holds it.
-- ARGV[2] task_id
-- ARGV[3] ttl_ms   marker lifetime for "claim" (bounds a lost message's hold)
-- Returns for "claim": {1, task_id} if claimed, {0, holder_task_id} if not;
-- for "clear": 1 if the marker was ours and is deleted, else 0.

local marker, op, task_id = KEYS[1], ARGV[1], ARGV[2]
local current = redis.call('GET', marker)
if op == 'claim' then
  if current and current ~= task_id then
    return {0, current}
  end
  redis.call('SET', marker, task_id, 'PX', tonumber(ARGV[3]))
  return {1, task_id}
elseif op == 'clear' then
  if current == task_id then
    redis.call('DEL', marker)
    return 1
  end
  return 0
end
return redis.error_reply('dedupe.lua: unknown op ' .. tostring(op))
