-- park_head.lua: a running task puts itself back ahead of all parked work of
-- its name (redislock_pause, a retry of a park task, a run refused by a
-- listed limit), whatever the slots and bounds (it was admitted once), and
-- pauses the name (a pause only lengthens) or holds its parked work.
-- KEYS: the nineteen keys of includes/park_keys.lua (KEYS[17] to KEYS[19] only on a single server).
-- ARGV[1] name
-- ARGV[2] task_id
-- ARGV[3] limit        the run's limit; < 0 fixed
-- ARGV[4] envelope     the message as stored for re-publishing (opaque JSON)
-- ARGV[5] expires_in   ms until the task expires (0: never)
-- ARGV[6] task         the task name
-- ARGV[7] interval_us  the task's rate: microseconds per unit (0: no rate)
-- ARGV[8] burst        units that may start back to back
-- ARGV[9] cost         units this start takes
-- ARGV[10] pause_ms    pause the name this long (0: no pause)
-- ARGV[11] token       the promotion token the run was claimed with, or for a
--                      copy without one a mark of this copy ("~<host>:<pid>",
--                      parking/message.py copy_token); it becomes stale, so a copy of the
--                      run's message (redelivered after a crash) never runs,
--                      and a worker that lost the run's process reads the
--                      copy as given up here (run/request.py)
-- ARGV[12] hold_ms     hold the name's parked work this long for a listed
--                      limit (PMETA lhold; it only lengthens a hold for the
--                      same limit, and replaces one for another): nothing of
--                      it is promoted before, unless park_unhold.lua lifts
--                      the hold (the wake-up of that listed limit, when it
--                      has room); under a longer hold for the same limit,
--                      this head alone may go after hold_ms (PMETA lhead,
--                      with its task id)
-- ARGV[13] waits_for   the listed limit the hold is for (PMETA lwait; "" with
--                      hold_ms 0)
-- ARGV[14] fence       0, or the fencing token of a keep_latest run a listed
--                      limit refused (it never started its body): it goes
--                      back as the name's pending call, which a newer call
--                      replaces (PMETA head is not set, and cleared if it
--                      names this run; PMETA back: "<fence>|<id>"; PMETA
--                      dfirst cleared: a debounce's burst starts again).  A
--                      call parked already (other than a head) takes its
--                      place now, so it is not parked; but a run put back
--                      the same way with a lower fencing token (admitted
--                      before it, with a key limit over 1) is replaced
--                      instead
-- Returns {"parked", n_parked, pause_ms, replaced, due} (pause_ms: the pause
-- left; replaced: the ids it took out of the park, ARGV[14] only) |
-- {"dup", where, due} | {"superseded", by, due} (ARGV[14]: "by" is the
-- parked call that takes its place).  The due time comes last (Parking._call
-- reads it there on a Cluster).

--- @include "includes/extend_pause"
--- @include "includes/known_where"
--- @include "includes/new_entry"
--- @include "includes/next_due"
--- @include "includes/now"
--- @include "includes/park"
--- @include "includes/park_keys"
--- @include "includes/purge_expired_holders"
--- @include "includes/reclaim_overdue"
--- @include "includes/stored_limit"
--- @include "includes/supersede"
--- @include "includes/unpark"

local id, limit, token = ARGV[2], stored_limit(tonumber(ARGV[3])), ARGV[11]
local known = known_where(id)
if known then return {'dup', known, next_due(limit)} end
purge_expired_holders()
reclaim_overdue()
local entry = new_entry(limit, ARGV[4], tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]),
  tonumber(ARGV[8]), tonumber(ARGV[9]))
local n_parked = redis.call('ZCARD', PARK)
local pause_ms = tonumber(ARGV[10])
if pause_ms > 0 then pause_ms = extend_pause(PAUSE, pause_ms) end
-- A keep_latest run put back (ARGV[14]) gives way to a newer call parked
-- already, or takes the place of an older run put back the same way.
local fence, replaced, by = tonumber(ARGV[14]) or 0, {}, nil
if fence > 0 then
  local head = redis.call('HGET', PMETA, 'head')
  if head == id then  -- its own earlier retry marked it: it is replaceable now
    redis.call('HDEL', PMETA, 'head')
    head = nil
  end
  local newest = redis.call('ZRANGE', PARK, -1, -1)[1]
  if newest and newest ~= head then
    local back = redis.call('HGET', PMETA, 'back') or ''
    local sep = string.find(back, '|', 1, true)
    if sep and string.sub(back, sep + 1) == newest
        and tonumber(string.sub(back, 1, sep - 1)) < fence then
      unpark(newest)
      redis.call('HDEL', MSGS, newest)
      replaced[1] = newest
      n_parked = n_parked - 1
    else
      by = newest
    end
  end
end
local hold_ms = tonumber(ARGV[12])
if hold_ms > 0 then
  local hold = NOW_MS + hold_ms
  local current = redis.call('HMGET', PMETA, 'lhold', 'lwait')
  -- A hold for another limit is replaced: this head now waits for this one.
  if hold > tonumber(current[1] or '0') or current[2] ~= ARGV[13] then
    redis.call('HSET', PMETA, 'lhold', hold, 'lwait', ARGV[13])
    redis.call('HDEL', PMETA, 'lhead')
  else
    -- A longer hold for this limit stays for the rest (a wake-up or a run
    -- that made way set it; letting them go early only gets them sent
    -- back), but this head goes alone when its own wait ends (a refusal by
    -- the limit's rate, which admits it then): rate_admits.lua.  A call
    -- that takes this run's place goes then instead.
    redis.call('HSET', PMETA, 'lhead', hold .. '|' .. (by or id))
  end
end
if token ~= '' then
  redis.call('ZREM', TOKENS, 'c|' .. id .. '|' .. token)
  supersede(id, token)
end
if by then return {'superseded', by, next_due(limit, nil, true)} end
if fence > 0 then
  -- Its place is a new call's to take: a debounce's burst starts again then.
  redis.call('HSET', PMETA, 'back', fence .. '|' .. id)
  redis.call('HDEL', PMETA, 'dfirst')
end
local first = redis.call('ZRANGE', PARK, 0, 0, 'WITHSCORES')
entry.seq = first[2] and tonumber(first[2]) - 1 or redis.call('HINCRBY', PMETA, 'seq', 1)
park(id, entry)
if fence == 0 then redis.call('HSET', PMETA, 'head', id) end
return {'parked', n_parked + 1, pause_ms, replaced, next_due(limit, nil, true)}
