-- fenced_write.lua: the storage side of fencing tokens.  A write (or a
-- fenced read, "claim") is accepted only if its token is at least the
-- highest token the resource has seen; an accepted call raises that mark to
-- its token.  So once a newer lock holder has touched the resource, every
-- older holder (paused, partitioned, expired) is shut out for good, while a
-- holder may read and write as often as it likes with its own token.
-- KEYS[1] resource  HASH  {fence = highest token seen, value = current value}
-- KEYS[2] guard     HASH  optional: the info hash of the lock whose tokens these
--                   are (common.lua); a token at most its ':superseded' mark is
--                   refused (lock_supersede), as a stale one is
-- ARGV[1] token     the caller's fencing token (decimal integer >= 0)
-- ARGV[2] mode      "write": store ARGV[3] as the value; "claim": read only
-- ARGV[3] value     the new value (mode "write")
-- Returns {accepted (1/0), highest token seen (after the call), value or false}
-- where value is the value after the call (nil when never written).

local token, mode = ARGV[1], ARGV[2]
if not string.match(token, '^%d+$') or #token > 20 then
  return redis.error_reply('fencing token must be a non-negative decimal integer, got ' .. token)
end
if mode ~= 'write' and mode ~= 'claim' then
  return redis.error_reply('mode must be "write" or "claim", got ' .. tostring(mode))
end

-- Compare as decimal strings: tokens are up to 2^63 and Lua numbers are doubles.
local function ge(a, b)
  if #a ~= #b then return #a > #b end
  return a >= b
end
local function strip(s)
  local stripped = string.gsub(s, '^0+', '')
  if stripped == '' then return '0' end
  return stripped
end

token = strip(token)
local seen = redis.call('HGET', KEYS[1], 'fence')
if seen and not ge(token, seen) then
  return {0, seen, redis.call('HGET', KEYS[1], 'value')}
end
local mark = KEYS[2] and redis.call('HGET', KEYS[2], ':superseded')
if mark and ge(strip(string.match(mark, '^(%d+)')), token) then
  return {0, seen or '0', redis.call('HGET', KEYS[1], 'value')}
end
if mode == 'write' then
  redis.call('HSET', KEYS[1], 'fence', token, 'value', ARGV[3])
elseif seen ~= token then
  redis.call('HSET', KEYS[1], 'fence', token)
end
return {1, token, redis.call('HGET', KEYS[1], 'value')}
