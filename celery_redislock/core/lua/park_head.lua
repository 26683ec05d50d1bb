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
-- ARGV[11] token       the promotion token the run was claimed with ("":
--                      none); it becomes stale, so a copy of the run's
--                      message (redelivered after a crash) never runs
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
-- ARGV[14] replaceable "1": a keep_latest run a listed limit refused (it never
--                      started its body): it goes back as the name's pending
--                      call, which a newer call replaces (PMETA head is not
--                      set), and if a call is parked already (newer than it:
--                      a keep_latest park holds one call besides a head put
--                      back), that call takes its place now and it is not
--                      parked
-- Returns {"parked", n_parked, pause_ms, due} (pause_ms: the pause left) |
-- {"dup", where, due} | {"superseded", by, due} (ARGV[14]: "by" is the
-- parked call that takes its place).

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
    -- the limit's rate, which admits it then): rate_admits.lua.
    redis.call('HSET', PMETA, 'lhead', hold .. '|' .. id)
  end
end
if token ~= '' then
  redis.call('ZREM', TOKENS, 'c|' .. id .. '|' .. token)
  supersede(id, token)
end
local replaceable = ARGV[14] == '1'
if replaceable then
  local newest = redis.call('ZRANGE', PARK, -1, -1)[1]
  if newest and newest ~= redis.call('HGET', PMETA, 'head') then
    -- Without a token, its message's copies are recorded stale under "", so
    -- that a worker that lost the run's process reads it as given up here.
    if token == '' then supersede(id, '') end
    return {'superseded', newest, next_due(limit, nil, true)}
  end
end
local first = redis.call('ZRANGE', PARK, 0, 0, 'WITHSCORES')
entry.seq = first[2] and tonumber(first[2]) - 1 or redis.call('HINCRBY', PMETA, 'seq', 1)
park(id, entry)
if not replaceable then redis.call('HSET', PMETA, 'head', id) end
return {'parked', n_parked + 1, pause_ms, next_due(limit, nil, true)}
