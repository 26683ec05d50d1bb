-- Record in `turns` that `name`, just taken out of `blocked`, had its turn
-- of the listed limit at `at` (Redis time, us): noted again while others
-- wait, it goes to the back (includes/place_in_blocked.lua).  With nobody
-- left waiting the records go: every name is new then.  `turns` lives
-- `ttl_ms` more.
local function record_turn(blocked, turns, name, at, ttl_ms)
  if redis.call('EXISTS', blocked) == 0 then
    redis.call('DEL', turns)
    return
  end
  redis.call('ZADD', turns, at, name)
  redis.call('PEXPIRE', turns, ttl_ms)
end
