-- fenced_claim.lua: a fenced read (see fenced_write.lua): the caller's token
-- is checked as a write's, and an accepted claim raises the resource's mark
-- to it without changing the value, so every older holder is shut out.
-- KEYS[1] resource  HASH  {fence = highest token seen, value = current value}
-- KEYS[2] guard     HASH  optional: as fenced_write.lua's
-- ARGV[1] token     the caller's fencing token (decimal integer >= 0)
-- Returns {accepted (1/0), highest token seen (after the call), value or false}.

--- @include "includes/fence_check"

local token, seen, refused = fence_check(ARGV[1], KEYS[1], KEYS[2])
if refused then return refused end
if seen ~= token then redis.call('HSET', KEYS[1], 'fence', token) end
return {1, token, redis.call('HGET', KEYS[1], 'value')}
