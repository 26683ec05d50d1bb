--- @include "includes/now"

-- A listed limit's blocked set (limit_block.lua) is served in rounds: a
-- name that has not had a turn of the limit in the current round goes
-- before every name noted after a turn, first come first served among
-- such new names; a name that had its turn goes to the back.  So an
-- account with a few tasks is not served behind a round of heavy accounts
-- that had their turn already, and no name has two turns in a round while
-- another waits: a name noted after a turn has its score at the time of
-- the note; a new name its time less NEW_NAMES_FIRST_MS (10^13 ms, about
-- 317 years), which sorts it before all of those.
local NEW_NAMES_FIRST_MS = 10000000000000

-- The score that notes `name` (not in `blocked`) in `blocked`: at the back
-- if `had_turn` (it just had one) or if `turns` records a turn of it in
-- the current round (since the oldest name noted after a turn was noted:
-- that name's turn comes before its next one), else with the new names.
-- Drops the records of earlier rounds.
local function place_in_blocked(blocked, turns, name, had_turn)
  if had_turn then return NOW_MS end
  local oldest = redis.call('ZRANGEBYSCORE', blocked, 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  redis.call('ZREMRANGEBYSCORE', turns, '-inf', '(' .. (oldest[2] or NOW_MS))
  if redis.call('ZSCORE', turns, name) then return NOW_MS end
  return NOW_MS - NEW_NAMES_FIRST_MS
end
