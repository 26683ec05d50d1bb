--- @include "includes/admissible"
--- @include "includes/holder_state"
--- @include "includes/lease_set_keys"
--- @include "includes/limit_of"
--- @include "includes/now"
--- @include "includes/purge_expired_holders"
--- @include "includes/record_turn"

-- Take the first name noted in `blocked` (limit_block.lua; in the order of
-- includes/place_in_blocked.lua: names new to this round first, then by
-- the time of their note) but `passed_over` out of the set, if its head
-- would be admitted by this listed limit now, counting `in_flight` slots
-- as taken besides its holders (a name noted with holds 0 leaves the set,
-- its turn recorded in `turns`: includes/record_turn.lua).  A name noted
-- with holds 1 is noted again at once, at the back, marked so (the
-- keys then live `ttl_ms` more): its caller promotes one of its tasks and
-- holds the rest for the limit again, so the next release that reaches it
-- promotes one more.  `queued`: whether a waiter is queued on the limit,
-- if the caller knows it (nil: read here).  Returns {name, asks, holds,
-- room} (asks and holds as noted; room 1 if no other name is noted and
-- the limit would admit that head once more after this wake-up) or {}:
-- none when the set is empty,
-- when a blocking waiter is queued on the limit (it is handed the slot,
-- and a newcomer may not pass it: acquire.lua), or when the first head is
-- not admissible by its own limit beside the current holders (THE
-- INVARIANT), so that a woken head is admitted when it tries unless
-- another run takes the slot first; in order: the first waits for a slot
-- its limit admits, the others behind it.
local function wake_first(blocked, limits, turns, passed_over, in_flight, ttl_ms, queued)
  local first_two = redis.call('ZRANGE', blocked, 0, 1)
  local first = first_two[1]
  if first == passed_over then first = first_two[2] end
  if not first then return {} end
  if queued == nil then queued = redis.call('EXISTS', QUEUE) == 1 end
  if queued then return {} end
  purge_expired_holders()
  local noted = redis.call('HGET', limits, first) or '1 0'
  local raw, holds = string.match(noted, '^(%-?%d+) ?(%d?) ?w?$')
  raw, holds = tonumber(raw or '1'), tonumber(holds) or 0
  local state = holder_state()
  state.n = state.n + in_flight
  local limit = limit_of(raw)
  if not admissible(state, limit) then return {} end
  if holds == 1 then
    redis.call('ZADD', blocked, NOW_US, first)  -- to the back
    -- Marked as noted again by a wake-up: limit_forget.lua takes back only
    -- such a note, not one limit_block.lua made since (it rewrites the entry).
    redis.call('HSET', limits, first, raw .. ' 1 w')
    redis.call('PEXPIRE', blocked, ttl_ms)
    redis.call('PEXPIRE', limits, ttl_ms)
  else
    redis.call('ZREM', blocked, first)
    redis.call('HDEL', limits, first)
    record_turn(turns, first, NOW_US, ttl_ms)
  end
  -- Room for one more only while no other name waits: one in flight to
  -- each of them (promoted, not holding yet) is not counted here.
  local room = 0
  state.n = state.n + 1
  if redis.call('ZCARD', blocked) == holds and admissible(state, limit) then room = 1 end
  return {first, raw, holds, room}
end
