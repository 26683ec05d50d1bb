-- inspect.lua: read-only view of one lease set (for holders(), locked(), the CLI).
-- Standalone (no includes: it writes nothing and needs none of its helpers).
-- KEYS: the seven keys of includes/lease_set_keys.lua (holders, info, fence, queue, qinfo, wake, override),
--   and KEYS[8] HELD (optional; unused); only holders, info, queue and qinfo are read.
-- ARGV: none.
-- Returns {now_ms, holders, waiters} where holders is a flat list
-- {owner, expiry_ms, info, ...} of unexpired holders and waiters a flat list
-- {owner, qinfo, ...} of live waiters in arrival order.  The info and qinfo
-- entries are returned as stored (formats in includes/lease_set_keys.lua; read by
-- holders.parse_inspect); a holder whose info entry is missing (its
-- info key was deleted) comes with an empty string.

local HOLDERS, INFO, QUEUE, QINFO = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local t = redis.call('TIME')
local NOW_MS = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

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
