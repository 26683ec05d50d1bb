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
--                         A rate set here applies from the next start on: the
--                         schedule of admissions the old rate booked is cut to
--                         at most a full burst of the new one, and the schedule
--                         of starts to that plus MAX_START_WAIT_US (runs
--                         admitted already may be waiting that long to start:
--                         they keep their places), so a raised rate does not
--                         wait out the times the old one booked; starts
--                         booked within that bound count against the new rate.
--                         A cleared rate leaves both (the starts they booked
--                         count against the code's rate, which this script
--                         does not know)
-- ARGV[1] limit        the limit; "": leave it as it is; "-": remove it
-- ARGV[2] interval_us  the rate's microseconds per unit; "": leave; "-": remove
-- ARGV[3] burst        with interval_us
-- ARGV[4] rate         with interval_us: its text
-- Returns the override after the change, as HGETALL does.  The hash has no
-- TTL: an override stays until it is cleared (an empty one is deleted).

--- @include "includes/gcra"
--- @include "includes/now"
--- @include "includes/start_delay"

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
  -- Each bound, and each key's TTL as its writer sets it (gcra(), start_delay()).
  local cuts = {{KEYS[3], full, SCHEDULE_LAG_US}, {KEYS[4], full + MAX_START_WAIT_US, 0}}
  for _, cut in ipairs(cuts) do
    local key, most, lag = cut[1], cut[2], cut[3]
    if tonumber(redis.call('GET', key) or '0') > most then
      redis.call('SET', key, string.format('%.0f', most),
        'PX', math.ceil((most - NOW_US + lag) / 1000) + 1)
    end
  end
end
return redis.call('HGETALL', key)
