-- park_inspect.lua: read-only counts (and optionally the first entries) of
-- one name's parked work, for status and listing.
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] unused).
-- ARGV[1] name
-- ARGV[2] count    how many parked entries to list (0: none)
-- Returns {now_ms, parked, oldest_enqueued_ms (0: none), inflight, overdue,
--          {task_id, enqueued_ms, expires_ms, envelope, ...} (the first count parked),
--          {task_id, enqueued_ms, deadline_ms, envelope, ...} (with count > 0:
--          every promotion in flight, at most count),
--          pause_ms (the pause left, 0: none), head_wait_ms (how long until the
--          head's rate and the pause admit it, 0: now or nothing parked),
--          interval_us, burst (the rate the head is admitted by, an override's
--          or its own; interval 0: none or nothing parked),
--          limit (the name's limit now, an override's or the last one stored; 0: unknown),
--          waits_for (the listed limit its parked work is held for, PMETA lwait,
--          while that hold lasts and something is parked; "": none)}.

--- @include "includes/lease_set_keys"
--- @include "includes/limit_of"
--- @include "includes/message"
--- @include "includes/now"
--- @include "includes/park_keys"
--- @include "includes/rate_admits"
--- @include "includes/rate_terms"
--- @include "includes/read_entry"
--- @include "includes/read_inflight"

local count = tonumber(ARGV[2])
local parked = redis.call('ZCARD', PARK)
local oldest = 0
local listed = {}
local n = math.max(count, 1)
for _, id in ipairs(redis.call('ZRANGE', PARK, 0, n - 1)) do
  local e = read_entry(redis.call('HGET', PARKED, id))
  if oldest == 0 or e.enqueued_ms < oldest then oldest = e.enqueued_ms end
  if count > 0 then
    for _, v in ipairs({id, e.enqueued_ms, e.expires_ms, message(id, e)}) do
      listed[#listed + 1] = v
    end
  end
end
local inflight, overdue = 0, 0
local promoted = {}
local raw = redis.call('HGETALL', INFLIGHT)
for i = 1, #raw, 2 do
  local e = read_inflight(raw[i + 1])
  inflight = inflight + 1
  if e.deadline_ms <= NOW_MS then overdue = overdue + 1 end
  if inflight <= count then
    for _, v in ipairs({raw[i], e.enqueued_ms, e.deadline_ms, message(raw[i], e)}) do
      promoted[#promoted + 1] = v
    end
  end
end
local head_wait_ms, interval, burst = 0, 0, 0
local head = redis.call('ZRANGE', PARK, 0, 0)[1]
if head then
  local e = read_entry(redis.call('HGET', PARKED, head))
  local ok, wait_us = rate_admits(e, false, true, head)
  if not ok then head_wait_ms = math.ceil(wait_us / 1000) end
  interval, burst = rate_terms(OVERRIDE, e.interval, e.burst, e.cost)
end
local pause_ms = math.max(redis.call('PTTL', PAUSE), 0)
local raw = tonumber(redis.call('HGET', PMETA, 'limit') or '0')
local limit = 0
if raw ~= 0 then limit = limit_of(raw) end
local waits_for = ''
if parked > 0 then
  local hold = redis.call('HMGET', PMETA, 'lhold', 'lwait')
  if tonumber(hold[1] or '0') > NOW_MS then waits_for = hold[2] or '' end
end
return {NOW_MS, parked, oldest, inflight, overdue, listed, promoted, pause_ms, head_wait_ms,
  math.floor(interval), burst, limit, waits_for}
