-- override.lua: set or clear a name's run-time override (an operator's
-- `celery redislock limit set / clear`): a limit that replaces every
-- non-fixed caller's limit and a rate that replaces every caller's rate
-- (read where includes/lease_set_keys.lua and includes/gcra.lua resolve limits and rates).
-- KEYS[1] override  HASH  fields "limit", "interval_us", "burst", "rate" (the
--                         rate as the operator wrote it, for display)
-- KEYS[2] info      HASH  the name's holder info (includes/lease_set_keys.lua): a changed limit
--                         drops its cached bound of the holders' limits, which
--                         the old limit may have made too high
-- KEYS[3] rate      STRING the name's rate schedule of admissions (includes/gcra.lua)
-- KEYS[4] started   STRING its schedule of starts (includes/start_delay.lua)
--                         A rate set here applies from the next start on, so
--                         each schedule the old rate booked is cut to at most
--                         a full burst of the new one (a raised rate admits
--                         and starts the next run within one new interval,
--                         not at the time the old rate booked); a cleared rate
--                         leaves them (the starts they booked count against
--                         the code's rate, which this script does not know)
-- ARGV[1] limit        the limit; "": leave it as it is; "-": remove it
-- ARGV[2] interval_us  the rate's microseconds per unit; "": leave; "-": remove
-- ARGV[3] burst        with interval_us
-- ARGV[4] rate         with interval_us: its text
-- Returns the override after the change, as HGETALL does.  The hash has no
-- TTL: an override stays until it is cleared (an empty one is deleted).

--- @include "includes/gcra"
--- @include "includes/now"

local key = KEYS[1]
if ARGV[1] == '-' then
  redis.call('HDEL', key, 'limit')
elseif ARGV[1] ~= '' then
  redis.call('HSET', key, 'limit', ARGV[1])
end
if ARGV[1] ~= '' then redis.call('HDEL', KEYS[2], ':limit') end  -- LIMIT_FIELD of includes/lease_set_keys.lua
if ARGV[2] == '-' then
  redis.call('HDEL', key, 'interval_us', 'burst', 'rate')
elseif ARGV[2] ~= '' then
  redis.call('HSET', key, 'interval_us', ARGV[2], 'burst', ARGV[3], 'rate', ARGV[4])
  local full = NOW_US + tonumber(ARGV[2]) * tonumber(ARGV[3])
  -- Each key's TTL as its writer sets it (gcra(), start_delay()).
  for i, lag in ipairs({SCHEDULE_LAG_US, 0}) do
    if tonumber(redis.call('GET', KEYS[2 + i]) or '0') > full then
      redis.call('SET', KEYS[2 + i], string.format('%.0f', full),
        'PX', math.ceil((full - NOW_US + lag) / 1000) + 1)
    end
  end
end
return redis.call('HGETALL', key)
