-- dedupe_claim.lua: take the enqueue-time de-duplication marker of one lock
-- name (at most one queued-or-running message per key, the celery-once use
-- case) for a task id, unless another task id holds it; the holder itself (a
-- retry or requeue re-publishing the same id) re-claims and refreshes it.
-- Standalone (no includes).  The key shares the lock's hash tag.
-- KEYS[1] marker   STRING  <prefix>:{<name>}:enqueued:<task name> -> task id of the message
--                  (or :throttle:<task name>, the window of lock_throttle without trailing,
--                  claimed with ttl = the window and never cleared)
-- ARGV[1] task_id
-- ARGV[2] ttl_ms   marker lifetime (bounds a lost message's hold)
-- Returns {1, task_id} if claimed, {0, holder_task_id} if not.

local marker, task_id = KEYS[1], ARGV[1]
local current = redis.call('GET', marker)
if current and current ~= task_id then
  return {0, current}
end
redis.call('SET', marker, task_id, 'PX', tonumber(ARGV[2]))
return {1, task_id}
