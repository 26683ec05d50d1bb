--- @include "includes/inflight_deadline"
--- @include "includes/inflight_first"
--- @include "includes/lease_set_keys"
--- @include "includes/limit_of"
--- @include "includes/now"
--- @include "includes/park_keys"
--- @include "includes/parked_hold"
--- @include "includes/rate_admits"
--- @include "includes/read_entry"

-- When the sweeper should look at this name next (ms, Redis time), or -1:
-- now if work is parked and a slot is free (later if its head waits for a
-- hold, its rate or a pause: a *timed* due); else the earliest holder expiry
-- (a holder that dies frees its slot then) or in-flight deadline.
-- `n_holders` (the holder count) and `parked` (whether anything is parked)
-- when the caller knows them, else nil: read here.
local function next_due(raw_limit, n_holders, parked)
  local limit = limit_of(raw_limit)
  local due, timed = -1, false
  local function at(ms, is_timed)
    if due < 0 or ms < due then due = ms end
    timed = timed or is_timed or false
  end
  if parked == nil then parked = redis.call('ZCARD', PARK) > 0 end
  if parked then
    if (n_holders or redis.call('ZCARD', HOLDERS)) < limit then
      -- A slot is free: due now, unless the head waits for a hold (its
      -- entry is not read then), its rate or a pause.
      local held_ms, _, head = parked_hold(nil)
      if held_ms > 0 then
        at(NOW_MS + held_ms, true)
      else
        head = head or redis.call('ZRANGE', PARK, 0, 0)[1]
        local ok, wait_us = rate_admits(read_entry(redis.call('HGET', PARKED, head)), false, true, head)
        if ok then at(NOW_MS) else at(NOW_MS + math.ceil(wait_us / 1000), true) end
      end
    else
      local first = redis.call('ZRANGE', HOLDERS, 0, 0, 'WITHSCORES')
      if first[2] then at(tonumber(first[2])) else at(NOW_MS) end
    end
  end
  if inflight_first == nil then
    for _, entry in ipairs(redis.call('HVALS', INFLIGHT)) do
      at(inflight_deadline(entry))
    end
  elseif inflight_first then
    at(inflight_first)
  end
  -- due < 0 exactly when nothing is parked or in flight, so no message is
  -- needed either (a leftover, say of a worker of an earlier version, goes).
  if due < 0 then
    redis.call('DEL', PMETA, MSGS)
  else
    redis.call('HSET', PMETA, 'limit', raw_limit)
  end
  if INDEX then
    if due < 0 then
      redis.call('ZREM', INDEX, PNAME)
    else
      -- Sweepers sleep until the index's earliest time, one interval at
      -- most: a due that becomes the earliest wakes them through WAKE when
      -- a timed one (a rate spacing promotions, a hold) is among what it
      -- was made of, so a promotion is not late by a sweep interval.  A due
      -- of holders' expiries and reservations' deadlines alone (a crash, a
      -- lost message) waits for the next look, within one interval, as on
      -- a Cluster: not reading the index's head for it spares every call
      -- on a full name a command.
      local sooner = false
      if timed and due > NOW_MS then  -- only a time to come is published as sooner
        local first = redis.call('ZRANGE', INDEX, 0, 0, 'WITHSCORES')
        sooner = not first[2] or due < tonumber(first[2])
      end
      redis.call('ZADD', INDEX, due, PNAME)
      -- Best effort (pcall): sweepers look at the index every interval
      -- anyway, and a user denied PUBLISH must not see this call fail after
      -- its writes (a worker's start check names the missing permission).
      if sooner then redis.pcall('PUBLISH', INDEX .. ':wake', due) end
    end
  end
  return due
end
