--- @include "includes/lease_set_keys"
--- @include "includes/now"

-- List the name in HELD until `expiry_ms` at least (never earlier: GT); a
-- release that leaves no holder takes it out (unindex_held()).  So the
-- index holds the names with a lease that may be live, and a name costs one
-- ZADD per grant or renewal and one ZREM when it empties.  Names left by
-- holders that died (their leases ended unreleased) are dropped when a name
-- enters with a token divisible by 16 (amortised; readers skip them by their
-- score meanwhile).  The name is the hash tag of HOLDERS (names and prefixes
-- never contain braces: keys.py).
local function index_held(expiry_ms, token)
  if not HELD then return end
  if redis.call('ZADD', HELD, 'GT', expiry_ms, string.match(HOLDERS, '{([^}]*)}')) == 1
      and token % 16 == 0 then
    redis.call('ZREMRANGEBYSCORE', HELD, '-inf', '(' .. NOW_MS)
  end
end
