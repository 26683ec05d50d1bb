-- limit_changed.lua: a run-time override of a name changed (override.lua):
-- have the sweepers wake the keys whose parked heads wait for the name as
-- a listed limit (a raised limit has room for them now), by noting the
-- name among the limits to wake (limit_changed_take.lua takes them) and
-- publishing on the index's wake channel.  Standalone (no includes).
-- KEYS[1] index    ZSET <prefix>:{park:index} (its wake channel: KEYS[1]:wake)
-- KEYS[2] limits   ZSET <prefix>:{park:index}:limits: name -> 0, the names
--                  whose waiting keys the sweepers wake at their next pass;
--                  lives 60 s after the last change (a key's hold ends by
--                  itself sooner)
-- ARGV[1] the name
-- Returns 1.

redis.call('ZADD', KEYS[2], 0, ARGV[1])
redis.call('PEXPIRE', KEYS[2], 60000)
redis.pcall('PUBLISH', KEYS[1] .. ':wake', 0)  -- best effort, see includes/next_due.lua
return 1
