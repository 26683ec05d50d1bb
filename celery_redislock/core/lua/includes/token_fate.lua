--- @include "includes/now"
--- @include "includes/park_keys"

local STALE_MEMORY_MS = 7 * 24 * 3600 * 1000  -- as the revoke records (parking.REVOKE_MEMORY)
local CLAIMED_MEMORY_MS = 3600 * 1000  -- kombu's default visibility timeout
local CLAIMED_KEPT = 10000

-- Record the fate of the copies of `id` carrying `token` (see TOKENS):
-- 's' stale, 'c' claimed.  Expired records go; beyond CLAIMED_KEPT records the
-- soonest to expire go first, which are claims (stale ones are kept longer).
-- That upkeep runs with every stale record (rare: crashes, lost publishes) and
-- with one claim in 16, so that a claim (every task makes one) costs a ZADD
-- and the key's expiry, which always covers its newest record.
local function token_fate(fate, id, token)
  local keep = fate == 's' and STALE_MEMORY_MS or CLAIMED_MEMORY_MS
  redis.call('ZADD', TOKENS, NOW_MS + keep, fate .. '|' .. id .. '|' .. token)
  if fate == 's' or (tonumber(token) or 0) % 16 == 0 then
    redis.call('ZREMRANGEBYSCORE', TOKENS, '-inf', NOW_MS)
    redis.call('ZREMRANGEBYRANK', TOKENS, 0, -CLAIMED_KEPT - 1)
  end
  redis.call('PEXPIRE', TOKENS, STALE_MEMORY_MS)
end
