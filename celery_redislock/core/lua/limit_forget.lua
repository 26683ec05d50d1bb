-- limit_forget.lua: take a name out of this listed limit's blocked set
-- (limit_block.lua): limit_wake.lua noted it again when it woke it, and
-- its wake-up held nothing again (nothing left parked, or nothing promoted).
-- KEYS[1] blocked  limit_block.lua's KEYS[8]
-- KEYS[2] limits   limit_block.lua's KEYS[9]
-- ARGV[1] the name
-- Returns 1 if it was noted, else 0.

redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
