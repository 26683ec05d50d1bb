-- inspect.lua: read-only view of one lease set (for holders(), locked(), the CLI).
-- KEYS: the six keys of common.lua.
-- ARGV: none.
-- Returns {now_ms, holders, waiters} where holders is a flat list
-- {owner, expiry_ms, info, ...} of unexpired holders and waiters a flat list
-- {owner, qinfo, ...} of live waiters in arrival order.

local holders = {}
local raw = redis.call('ZRANGEBYSCORE', HOLDERS, '(' .. NOW_MS, '+inf', 'WITHSCORES')
for i = 1, #raw, 2 do
  holders[#holders + 1] = raw[i]
  holders[#holders + 1] = raw[i + 1]
  holders[#holders + 1] = redis.call('HGET', INFO, raw[i]) or ''
end
local waiters = {}
for _, owner in ipairs(redis.call('ZRANGE', QUEUE, 0, -1)) do
  local entry = redis.call('HGET', QINFO, owner)
  if entry and tonumber(string.match(entry, '^(%d+)')) > NOW_MS then
    waiters[#waiters + 1] = owner
    waiters[#waiters + 1] = entry
  end
end
return {NOW_MS, holders, waiters}
