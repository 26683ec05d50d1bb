--- @include "includes/now"
--- @include "includes/park_keys"
--- @include "includes/parked_hold"

-- Hold the name's parked work for the listed limit `limit` for `hold_for`
-- ms more (PMETA lhold and lwait, as park_head.lua sets them), if anything
-- is parked and no hold for another limit is on (it is left alone); a
-- hold only lengthens.  Returns 1 if the work is now held for `limit`, else 0.
local function hold_for_limit(limit, hold_for)
  if redis.call('ZCARD', PARK) == 0 then return 0 end
  local current = redis.call('HMGET', PMETA, 'lhold', 'lwait', 'hold')
  local until_ms = tonumber(current[1] or '0')
  if until_ms > NOW_MS and current[2] ~= limit then return 0 end
  -- The name now waits for its turn at the limit: a head's own time under
  -- the hold before (lhead, a refusal by the limit's rate) goes with it.
  redis.call('HDEL', PMETA, 'lhead')
  local hold = NOW_MS + hold_for
  if hold > until_ms then
    redis.call('HSET', PMETA, 'lhold', hold, 'lwait', limit)
    until_ms = hold
  end
  -- All three holds are known now: parked_hold() need not read them.
  debounce_until_ms, lhead_ms, lhead_id = tonumber(current[3] or '0'), 0, nil
  hold_until_ms = math.max(debounce_until_ms, until_ms)
  return 1
end
