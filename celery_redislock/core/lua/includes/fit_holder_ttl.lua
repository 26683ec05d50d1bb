--- @include "includes/lease_set_keys"
--- @include "includes/now"

-- Make the holders/info keys expire with their last lease (info, which may
-- hold only LIMIT_FIELD then, goes when the last holder has gone).
local function fit_holder_ttl()
  local top = redis.call('ZRANGE', HOLDERS, -1, -1, 'WITHSCORES')
  if top[2] then
    local ms = tonumber(top[2]) - NOW_MS
    if ms > 0 then
      redis.call('PEXPIRE', HOLDERS, ms)
      redis.call('PEXPIRE', INFO, ms)
    end
  else
    redis.call('DEL', INFO)
  end
end
