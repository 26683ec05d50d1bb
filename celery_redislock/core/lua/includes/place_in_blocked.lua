--- @include "includes/now"

-- A listed limit's blocked set (limit_block.lua) is served in rounds: a
-- name that has not had a turn of the limit in the current round goes
-- before every name noted after a turn, first come first served among
-- such new names; a name that had its turn goes to the back.  So an
-- account with a few tasks is not served behind a round of heavy accounts
-- that had their turn already, and no name has two turns in a round while
-- another waits.  Scores are Redis time in microseconds (two notes do not
-- tie): a name noted after a turn has the time of the note; a new name
-- that time less NEW_NAMES_FIRST_US (10^16 us, about 317 years), which
-- sorts it before all of those.
local NEW_NAMES_FIRST_US = 10000000000000000

-- The score that notes `name` (not in `blocked`) in `blocked`.  `turn`: -1
-- if it just had a turn (woken and promoted): at the back; a time (us) if
-- its turn was handed on to a woken name then (a run of it made way): just
-- before the names noted at or after that time (the name it handed its
-- slot to was noted again at that time: its next turn comes after this
-- one's); 0 if none: at the back if `turns` (includes/record_turn.lua)
-- records a turn of it in the current round, that is since the first name
-- noted after a turn was noted (that name's turn comes before its next
-- one), else with the new names.  Drops the records of earlier rounds (with
-- only new names waiting: those older than the first one's note, which
-- every name waiting came after, so the set stays as small as the names
-- served since), and all of them when a name with no turn is noted while
-- nobody waits (every name is new then).
local function place_in_blocked(blocked, turns, name, turn)
  if turn == -1 then return NOW_US end
  if turn > 0 then return turn - 1 end
  if redis.call('EXISTS', blocked) == 0 then
    redis.call('DEL', turns)
    return NOW_US - NEW_NAMES_FIRST_US
  end
  local first_after_turn = redis.call('ZRANGEBYSCORE', blocked, 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local round_began = tonumber(first_after_turn[2])
  if not round_began then
    round_began = tonumber(redis.call('ZRANGE', blocked, 0, 0, 'WITHSCORES')[2]) + NEW_NAMES_FIRST_US
  end
  redis.call('ZREMRANGEBYSCORE', turns, '-inf', string.format('(%.0f', round_began))
  if redis.call('ZSCORE', turns, name) then return NOW_US end
  return NOW_US - NEW_NAMES_FIRST_US
end
