-- dedupe_clear.lua: give back the de-duplication marker of dedupe_claim.lua
-- if the task id holds it (its run is over, or its message was discarded).
-- Standalone (no includes).
-- KEYS[1] marker   STRING  as dedupe_claim.lua's
-- ARGV[1] task_id
-- Returns 1 if the marker was this task id's and is deleted, else 0.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
