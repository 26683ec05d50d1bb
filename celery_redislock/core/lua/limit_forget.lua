-- limit_forget.lua: take a name out of this listed limit's blocked set
-- (limit_block.lua) if the note is the one a wake-up made when it noted the
-- name again (wake_first(), used by limit_wake.lua and limit_release.lua,
-- marks it): its wake-up held nothing again (nothing left parked).  A note
-- limit_block.lua made since (a run of the name refused by the limit, or
-- making way) stays.
-- KEYS[1] blocked  limit_block.lua's KEYS[8]
-- KEYS[2] limits   limit_block.lua's KEYS[9]
-- KEYS[3] turns    limit_block.lua's KEYS[10]: the name's turn (the time of
--                  that note) is recorded there (includes/record_turn.lua)
-- ARGV[1] the name
-- ARGV[2] ttl_ms   as limit_block.lua's ARGV[3]
-- Returns 1 if the note was taken back, else 0.

--- @include "includes/record_turn"

local noted = redis.call('HGET', KEYS[2], ARGV[1])
if not noted or string.sub(noted, -2) ~= ' w' then return 0 end
local turn = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if turn then record_turn(KEYS[3], ARGV[1], turn, tonumber(ARGV[2])) end
return removed
