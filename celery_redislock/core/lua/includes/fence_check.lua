--- @include "includes/decimal_at_least"
--- @include "includes/without_leading_zeros"

-- The check of a fenced call (fenced_write.lua, fenced_claim.lua): `raw`,
-- the caller's token, is accepted only if it is at least the highest token
-- the `resource` HASH has seen and above the ':superseded' mark of `guard`
-- (the lock's info hash, or nil).  Returns the token (no leading zeros), the
-- highest token seen (false: none) and, when refused, the script's reply.
local function fence_check(raw, resource, guard)
  if not string.match(raw, '^%d+$') or #raw > 20 then
    return nil, nil,
      redis.error_reply('fencing token must be a non-negative decimal integer, got ' .. raw)
  end
  local token = without_leading_zeros(raw)
  local seen = redis.call('HGET', resource, 'fence')
  if seen and not decimal_at_least(token, seen) then
    return token, seen, {0, seen, redis.call('HGET', resource, 'value')}
  end
  local mark = guard and redis.call('HGET', guard, ':superseded')
  if mark and decimal_at_least(without_leading_zeros(string.match(mark, '^(%d+)')), token) then
    return token, seen, {0, seen or '0', redis.call('HGET', resource, 'value')}
  end
  return token, seen, nil
end
