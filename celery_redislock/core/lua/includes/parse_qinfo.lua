-- A queue entry as expiry_ms, ttl_ms, limit (as passed), meta.
local function parse_qinfo(entry)
  local expiry, ttl_ms, limit, meta = string.match(entry, '^(%d+):(%d+):(%-?%d+):(.*)$')
  return tonumber(expiry), tonumber(ttl_ms), tonumber(limit), meta
end
