-- Record in `turns` that `name`, just taken out of the blocked set, had its turn
-- of the listed limit at `at` (Redis time, us): noted again while others
-- wait, it goes to the back (includes/place_in_blocked.lua, which drops
-- the records when a name is noted while nobody waits; kept here even if
-- the set is empty now: the name that made way for this one is noted
-- next).  `turns` lives `ttl_ms` more.
local function record_turn(turns, name, at, ttl_ms)
  redis.call('ZADD', turns, at, name)
  redis.call('PEXPIRE', turns, ttl_ms)
end
