-- park_where.lua: where a task id is in its name's park, and the fate of one
-- of its promotion tokens (read-only).
-- Standalone (no includes: it writes nothing).
-- KEYS[1] parked    HASH  the name's parked entries (includes/park_keys.lua's KEYS[9])
-- KEYS[2] inflight  HASH  its promotions in flight (KEYS[10])
-- KEYS[3] tokens    ZSET  the fates of its promotion tokens (KEYS[12])
-- ARGV[1] task_id
-- ARGV[2] token     a promotion token of the task ("": none)
-- Returns {where, fate}: where "parked", "inflight" (promoted, its message on
-- its way) or "" (neither: never parked, or claimed since); fate of the token
-- "stale" (that copy never runs), "claimed" or "" (none recorded, or no token).

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local where = ''
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  where = 'parked'
elseif redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  where = 'inflight'
end
local fate = ''
if ARGV[2] ~= '' then
  for _, f in ipairs({'s', 'c'}) do
    local until_ms = redis.call('ZSCORE', KEYS[3], f .. '|' .. ARGV[1] .. '|' .. ARGV[2])
    if fate == '' and until_ms and tonumber(until_ms) > now_ms then
      fate = f == 's' and 'stale' or 'claimed'
    end
  end
end
return {where, fate}
