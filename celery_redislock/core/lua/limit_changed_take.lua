-- limit_changed_take.lua: a sweeper takes the names limit_changed.lua noted
-- (each is taken by one sweeper), to wake the keys waiting for them.
-- Standalone (no includes).
-- KEYS[1] limits   limit_changed.lua's KEYS[2]
-- ARGV[1] count    most names taken
-- Returns the names taken.

local names = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #names > 0 then redis.call('ZREM', KEYS[1], unpack(names)) end
return names
