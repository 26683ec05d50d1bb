-- fenced_write.lua: the storage side of fencing tokens, a write.  A write
-- (or a fenced read, fenced_claim.lua) is accepted only if its token is at
-- least the highest token the resource has seen; an accepted call raises that
-- mark to its token.  So once a newer lock holder has touched the resource,
-- every older holder (paused, partitioned, expired) is shut out for good,
-- while a holder may read and write as often as it likes with its own token.
-- KEYS[1] resource  HASH  {fence = highest token seen, value = current value}
-- KEYS[2] guard     HASH  optional: the info hash of the lock whose tokens these
--                   are (includes/lease_set_keys.lua); a token at most its ':superseded' mark is
--                   refused (lock_supersede), as a stale one is
-- ARGV[1] token     the caller's fencing token (decimal integer >= 0)
-- ARGV[2] value     the new value
-- Returns {accepted (1/0), highest token seen (after the call), value or false}
-- where value is the value after the call (false when never written).

--- @include "includes/fence_check"

local token, _, refused = fence_check(ARGV[1], KEYS[1], KEYS[2])
if refused then return refused end
redis.call('HSET', KEYS[1], 'fence', token, 'value', ARGV[2])
return {1, token, ARGV[2]}
