-- override.lua: set or clear a name's run-time override (an operator's
-- `celery redislock limit set / clear`): a limit that replaces every
-- non-fixed caller's limit and a rate that replaces every caller's rate
-- (read where includes/lease_set_keys.lua and includes/gcra.lua resolve limits and rates).
-- Standalone (no includes).
-- KEYS[1] override  HASH  fields "limit", "interval_us", "burst", "rate" (the
--                         rate as the operator wrote it, for display)
-- KEYS[2] info      HASH  the name's holder info (includes/lease_set_keys.lua): a changed limit
--                         drops its cached bound of the holders' limits, which
--                         the old limit may have made too high
-- ARGV[1] limit        the limit; "": leave it as it is; "-": remove it
-- ARGV[2] interval_us  the rate's microseconds per unit; "": leave; "-": remove
-- ARGV[3] burst        with interval_us
-- ARGV[4] rate         with interval_us: its text
-- Returns the override after the change, as HGETALL does.  The hash has no
-- TTL: an override stays until it is cleared (an empty one is deleted).

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
end
return redis.call('HGETALL', key)
