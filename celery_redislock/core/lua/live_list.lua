-- live_list.lua: the statements of one process space (see liveness.py), read
-- at once.  Standalone (no includes).
-- KEYS[1] index   as live_register.lua's
-- ARGV[1] record key prefix: the record of process p is ARGV[1] .. p
-- Returns {process, stated_ms, record, ...}; record is "" when it expired.
local out = {}
local raw = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #raw, 2 do
  out[#out + 1] = raw[i]
  out[#out + 1] = raw[i + 1]
  out[#out + 1] = redis.call('GET', ARGV[1] .. raw[i]) or ''
end
return out
