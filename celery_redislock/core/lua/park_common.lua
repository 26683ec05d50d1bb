-- park_common.lua: the park's keys and helpers; included (--- @include) by
-- every park_*.lua script except park_due.lua.
--
-- Parked work of one name lives beside its lease set, under the same hash
-- tag {name}, so one call touches one cluster slot:
--   KEYS[1..7]        the lease set's keys (see common.lua); a *reservation*
--                     is a holder entry "rsv.<task id>" whose score is its
--                     deadline, so it counts against the limit everywhere
--                     (acquire, inspect, purge) and lapses by itself.
--   KEYS[8]  park     ZSET  parked task id -> sequence number (FIFO order)
--   KEYS[9]  parked   HASH  parked task id -> entry (see read_entry())
--   KEYS[10] inflight HASH  reserved task id -> "token|deadline_ms|" .. entry
--                     (published with its promotion token, not yet arrived)
--   KEYS[11] pmeta    HASH  {limit = last limit seen, seq = last sequence number,
--                     and for a debounced name (park_enqueue.lua ARGV[20]):
--                     hold = Redis time (ms) before which its parked run is
--                     not promoted, dfirst = when the first call of the
--                     burst was parked; head = the task a "head" mode of
--                     park_enqueue.lua put back ahead of the park: a run
--                     that paused or retries, which a keep_latest call does
--                     not replace unless it supersedes}
--   KEYS[12] tokens   ZSET  the fate of promotion tokens no longer in flight,
--                     member "s|<task id>|<token>" (stale: superseded, that
--                     copy never runs: a reservation that went overdue and
--                     was re-published with a new token, a publish its
--                     caller cancelled, the newer copy when an older one
--                     claimed first, a claim sent back to the park) or
--                     "c|<task id>|<token>" (claimed: a second copy is a
--                     duplicate), scored by the Redis time (ms) until which
--                     it is kept: STALE_MEMORY_MS (a copy the broker gives
--                     back late, after kombu's visibility timeout), and
--                     CLAIMED_MEMORY_MS for at most CLAIMED_KEPT claims (a
--                     duplicate publish arrives about when the original
--                     does).  A token in none of these is unknown (the lock
--                     Redis lost its data): the caller admits that copy.
--   KEYS[13] rate     STRING  the name's rate state (see rate_common.lua): a
--                     parked entry with a rate is promoted only when its
--                     rate admits it, and takes its units then
--   KEYS[14] pause    STRING  present while the name's starts are paused
--   KEYS[15] started  STRING  the schedule of the name's starts (start_delay()
--                     in rate_common.lua): a run waits that long before its
--                     body starts, so starts keep the rate, not only admissions
--   KEYS[16] msgs     HASH  task id -> its stored message (the envelope, opaque
--                     JSON, about 2 KB), for every id in PARKED or INFLIGHT:
--                     written when the task is parked or reserved with a
--                     message (entry_string()), read only to hand it out (a
--                     promotion, a drop, an expired or unclaimed task, a
--                     listing: message()) and deleted when the id is in
--                     neither; the key goes when the name has nothing parked
--                     or in flight (next_due()).  So the entries that
--                     promotion reads and rewrites stay small.
--   KEYS[17] index    ZSET  name -> Redis time (ms) at which the sweeper should
--                     look at the name.  Only on a single server: on a
--                     cluster it lives in another slot, so it is left out of
--                     KEYS and the caller updates it from the reply.  A
--                     name whose time becomes the index's earliest is
--                     published on the channel <index>:wake (next_due()).
--   KEYS[18] total    STRING  tasks parked over all names (single server only,
--                     like the index; redislock_park_max_total needs it).
--   KEYS[19] held     ZSET  the index of held names (HELD in common.lua;
--                     single server only)
-- ARGV[1] is always the name (the index member).
-- Times are Redis TIME (NOW_MS from common.lua); expires_ms = 0 means never.

--- @include common.lua
--- @include rate_common.lua

local PARK, PARKED, INFLIGHT, PMETA = KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local TOKENS, RATE, PAUSE, STARTED = KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local MSGS = KEYS[16]
local INDEX, TOTAL = KEYS[17], KEYS[18]
HELD = KEYS[19]
local PNAME = ARGV[1]
local STALE_MEMORY_MS = 7 * 24 * 3600 * 1000  -- as the revoke records (parking.REVOKE_MEMORY)
local CLAIMED_MEMORY_MS = 3600 * 1000  -- kombu's default visibility timeout
local CLAIMED_KEPT = 10000

local function rsv(id) return 'rsv.' .. id end

local function split(entry, n)
  local out, pos = {}, 1
  for i = 1, n - 1 do
    local bar = string.find(entry, '|', pos, true)
    out[i] = string.sub(entry, pos, bar - 1)
    pos = bar + 1
  end
  out[n] = string.sub(entry, pos)
  return out
end

-- The limit argument a call works with: its own, else (0: the sweeper, a
-- drop) the last one stored.  next_due() stores it while the name has parked
-- or in-flight work, and deletes PMETA when it has none.  Limits are kept
-- as passed (< 0: fixed, see limit_of() in common.lua) and resolved where
-- they are compared, so an override applies to work parked before it was set.
local function stored_limit(limit)
  if limit and limit ~= 0 then return limit end
  return tonumber(redis.call('HGET', PMETA, 'limit') or '1')
end

-- A parked task, as stored:
-- "seq|expires_ms|enqueued_ms|limit|publishes|interval_us|burst|cost|task|envelope".
-- limit is the task's own (its call's semaphore_limit when it was parked, as
-- passed: see stored_limit()) and
-- task its task name, so promotion can admit it by its own limit (see
-- own_limit()); publishes counts how often it was published with a token
-- (see promote_parked()); interval_us, burst and cost are its rate (interval
-- 0: none, see rate_admits()); envelope is empty: the message is in MSGS
-- (an entry written before MSGS existed carries it inline; message() reads
-- both, and the next write of the entry moves it to MSGS).
local function read_entry(raw)
  local f = split(raw or '0|0|0|0|0|0|1|1||', 10)
  return {seq = tonumber(f[1]), expires_ms = tonumber(f[2]), enqueued_ms = tonumber(f[3]),
    limit = tonumber(f[4]), publishes = tonumber(f[5]), interval = tonumber(f[6]),
    burst = tonumber(f[7]), cost = tonumber(f[8]), task = f[9], envelope = f[10]}
end

-- The entry as stored, without its message: an entry that still carries
-- one (a new task's, from the caller's arguments) hands it to MSGS first.
-- Promotion reads and rewrites entries; a 2 KB string costs Lua about as
-- much as five commands each time it is made, so messages stay out of them.
local function entry_string(id, e)
  if e.envelope ~= '' then
    redis.call('HSET', MSGS, id, e.envelope)
    e.envelope = ''
  end
  return string.format('%d|%d|%d|%d|%d|%d|%d|%d|', e.seq, e.expires_ms, e.enqueued_ms, e.limit,
    e.publishes, e.interval, e.burst, e.cost) .. e.task .. '|'
end

-- The stored message of task `id` (entry `e`), to hand out; with `forget`
-- the task leaves the park for good (it runs, or is dropped), so its
-- message goes too.
local function message(id, e, forget)
  local envelope = e.envelope
  if envelope == '' then envelope = redis.call('HGET', MSGS, id) or '' end
  if forget then redis.call('HDEL', MSGS, id) end
  return envelope
end

-- Whether the name's rate (and pause) admits entry `e` now; with `take`,
-- its units are taken when it does.  Parked work also waits for a debounced
-- name's hold (PMETA).  Returns admitted and, if not, the
-- microseconds until it would be.  An entry without a rate only waits
-- for a pause.  `parked`: `e` is parked work (promotion), whose schedule may
-- be kept SCHEDULE_LAG_US (at most half an interval) behind (see gcra()), so
-- a backlog keeps its rate when a promotion runs a little after its due time
-- (a sweeper's wake-up); an arriving start has none.
local hold_ms  -- PMETA's hold, read once per script call (0: none)
local function rate_admits(e, take, parked)
  if parked then
    if hold_ms == nil then hold_ms = tonumber(redis.call('HGET', PMETA, 'hold') or '0') end
    if hold_ms > NOW_MS then return false, (hold_ms - NOW_MS) * 1000 end
  end
  local interval, burst, cost = rate_terms(OVERRIDE, e.interval, e.burst, e.cost)
  if interval > 0 then
    local lag = 0
    if parked then lag = math.min(math.floor(interval / 2), SCHEDULE_LAG_US) end
    return gcra(RATE, PAUSE, NOW_US, interval, burst, cost, take, lag)
  end
  local paused = pause_left_us(PAUSE)
  if paused > 0 then return false, paused end
  return true, 0
end

-- The longest a run waits before its body starts to keep the rate of starts
-- (the spread of delivery delays, normally milliseconds); a run that would
-- wait longer (a rate lowered while its promotion was on its way) goes back
-- to the park instead of holding a worker process.
local MAX_START_WAIT_US = 250000

-- How long a run of entry `e` admitted now waits before its body starts (us;
-- 0 without a rate), recorded in the start schedule when at most
-- MAX_START_WAIT_US; a longer wait is returned without recording it.
local function start_wait(e)
  local interval, burst, cost = rate_terms(OVERRIDE, e.interval, e.burst, e.cost)
  if interval <= 0 then return 0 end
  return start_delay(STARTED, NOW_US, interval, burst, cost, MAX_START_WAIT_US)
end

-- An in-flight reservation: its token, its deadline and the parked entry.
local function read_inflight(raw)
  local f = split(raw, 3)
  local e = read_entry(f[3])
  e.token, e.deadline_ms = f[1], tonumber(f[2])
  return e
end

-- park() and unpark() are the only writers of PARK, so TOTAL follows every
-- change of it (counted by what ZADD / ZREM did, so a repeat cannot drift it);
-- at zero the key is deleted, so nothing is left once no task is parked.
local function park(id, e)
  if redis.call('ZADD', PARK, e.seq, id) == 1 and TOTAL then redis.call('INCR', TOTAL) end
  redis.call('HSET', PARKED, id, entry_string(id, e))
end

local function unpark(id)
  if redis.call('ZREM', PARK, id) == 1 and TOTAL and redis.call('DECR', TOTAL) <= 0 then
    redis.call('DEL', TOTAL)
  end
  redis.call('HDEL', PARKED, id)
end

-- The earliest deadline in INFLIGHT as known in this script call: nil
-- unknown, false none (set by reclaim_overdue(), kept by reserve(), forgotten
-- by unreserve()); next_due() reads the hash only when it is unknown.
local inflight_first

-- Reserve a slot for task `id` (entry `e`, which counts this publish) until
-- NOW + deadline_ms, as a holder entry with the task's own limit e.limit (the
-- caller checked admissible(state, limit_of(e.limit)), see common.lua); returns the
-- promotion token (a fencing token of the name, so unique and increasing).
local function reserve(state, id, e, deadline_ms)
  local meta = cjson.encode({reserved = true, task_id = id})
  local token = add_holder(state, rsv(id), deadline_ms, e.limit, meta)
  local deadline = NOW_MS + deadline_ms
  e.publishes = e.publishes + 1
  redis.call('HSET', INFLIGHT, id, string.format('%d|%d|', token, deadline) .. entry_string(id, e))
  if inflight_first ~= nil then
    inflight_first = inflight_first and math.min(inflight_first, deadline) or deadline
  end
  return token
end

-- The limit a parked task is admitted by (as passed, see stored_limit()): the
-- promoter's (evaluated now, so a raised plan applies at once) when the promoter is the same task name, else
-- the task's own limit from when it was parked (another task name sharing the
-- key, or the sweeper, which has no task).  The claim checks the run's limit
-- again at arrival.
local function own_limit(stored, task, promoter_limit, promoter_task)
  if promoter_task ~= '' and task == promoter_task then return promoter_limit end
  if stored and stored ~= 0 then return stored end
  return promoter_limit
end

local function unreserve(id)
  redis.call('ZREM', HOLDERS, rsv(id))
  redis.call('HDEL', INFO, rsv(id))
  redis.call('HDEL', INFLIGHT, id)
  inflight_first = nil
end

-- Record the fate of the copies of `id` carrying `token` (see TOKENS):
-- 's' stale, 'c' claimed.  Expired records go; beyond CLAIMED_KEPT records the
-- soonest to expire go first, which are claims (stale ones are kept longer).
-- That upkeep runs with every stale record (rare: crashes, lost publishes) and
-- with one claim in 16, so that a claim (every task makes one) costs a ZADD
-- and the key's expiry, which always covers its newest record.
local function token_fate(fate, id, token)
  local keep = fate == 's' and STALE_MEMORY_MS or CLAIMED_MEMORY_MS
  redis.call('ZADD', TOKENS, NOW_MS + keep, fate .. '|' .. id .. '|' .. token)
  if fate == 's' or (tonumber(token) or 0) % 16 == 0 then
    redis.call('ZREMRANGEBYSCORE', TOKENS, '-inf', NOW_MS)
    redis.call('ZREMRANGEBYRANK', TOKENS, 0, -CLAIMED_KEPT - 1)
  end
  redis.call('PEXPIRE', TOKENS, STALE_MEMORY_MS)
end

local function supersede(id, token) token_fate('s', id, token) end

-- 'stale', 'claimed' or 'unknown'
local function fate_of(id, token)
  for fate, what in pairs({s = 'stale', c = 'claimed'}) do
    local until_ms = redis.call('ZSCORE', TOKENS, fate .. '|' .. id .. '|' .. token)
    if until_ms and tonumber(until_ms) > NOW_MS then return what end
  end
  return 'unknown'
end

-- In-flight reservations past their deadline go back to the head of the
-- park list (their original sequence number), so they are re-published with a
-- new token; the old token is remembered as stale, so a copy of the old
-- message that the broker gives back after the new one ran is dropped.
-- Once per script call (NOW_MS does not move; reservations made since end
-- after it).  Leaves inflight_first known.
local reclaimed = false
local function reclaim_overdue()
  if reclaimed then return 0 end
  reclaimed = true
  local raw = redis.call('HGETALL', INFLIGHT)
  local n, first = 0, false
  for i = 1, #raw, 2 do
    local e = read_inflight(raw[i + 1])
    if e.deadline_ms <= NOW_MS then
      unreserve(raw[i])
      supersede(raw[i], e.token)
      park(raw[i], e)
      n = n + 1
    elseif not first or e.deadline_ms < first then
      first = e.deadline_ms
    end
  end
  inflight_first = first
  return n
end

-- When the sweeper should look at this name next (ms, Redis time), or -1:
-- now if work is parked and a slot is free; else the earliest holder expiry
-- (a holder that dies frees its slot then) or in-flight deadline.
-- `n_holders` (the holder count) and `parked` (whether anything is parked)
-- when the caller knows them, else nil: read here.
local function next_due(raw_limit, n_holders, parked)
  local limit = limit_of(raw_limit)
  local due = -1
  local function at(ms) if due < 0 or ms < due then due = ms end end
  if parked == nil then parked = redis.call('ZCARD', PARK) > 0 end
  if parked then
    if (n_holders or redis.call('ZCARD', HOLDERS)) < limit then
      -- A slot is free: due now, unless the head waits for its rate or a pause.
      local head = redis.call('ZRANGE', PARK, 0, 0)[1]
      local ok, wait_us = rate_admits(read_entry(redis.call('HGET', PARKED, head)), false, true)
      if ok then at(NOW_MS) else at(NOW_MS + math.ceil(wait_us / 1000)) end
    else
      local first = redis.call('ZRANGE', HOLDERS, 0, 0, 'WITHSCORES')
      if first[2] then at(tonumber(first[2])) else at(NOW_MS) end
    end
  end
  if inflight_first == nil then
    for _, entry in ipairs(redis.call('HVALS', INFLIGHT)) do
      at(tonumber(split(entry, 3)[2]))
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
      -- Sweepers sleep until the index's earliest time: one that becomes
      -- sooner (a rate spacing promotions, a parked task's due time) wakes
      -- them through WAKE, so a promotion is not late by a sweep interval.
      local first = redis.call('ZRANGE', INDEX, 0, 0, 'WITHSCORES')
      local sooner = due > NOW_MS and (not first[2] or due < tonumber(first[2]))
      redis.call('ZADD', INDEX, due, PNAME)
      if sooner then redis.call('PUBLISH', INDEX .. ':wake', due) end
    end
  end
  return due
end

-- Fill every free slot of the name from its park list, at most `max`, each
-- task admitted by its own limit and its rate (FIFO: a head that its own limit,
-- rate or a pause does not admit yet stops the promotion; a later release or
-- sweep promotes it):
-- overdue reservations first go back to the head of the list.  Tasks that
-- will never run leave the list, reported, never published: expired ones,
-- and ones already published `max_publishes` times without a worker claiming
-- them (no worker consumes their queue or knows their task name; 0: no
-- bound).  Appends kind, id, token, envelope per task to `out` (kind "p":
-- publish the envelope with this token now; "x": expired, token 0; "u":
-- unclaimed, token = how often it was published).  Returns the holder state
-- after it, and whether a task is left parked (nil: not known).
local function promote_parked(limit, deadline_ms, max, out, task, max_publishes)
  purge_expired_holders()
  reclaim_overdue()
  local state = holder_state()
  local done, parked = 0, nil
  while done < max do
    local head = redis.call('ZRANGE', PARK, 0, 0)[1]
    parked = head ~= nil
    if not head then break end
    local e = read_entry(redis.call('HGET', PARKED, head))
    local own = own_limit(e.limit, e.task, limit, task or '')
    local expired = e.expires_ms > 0 and e.expires_ms <= NOW_MS
    local unclaimed = max_publishes > 0 and e.publishes >= max_publishes
    if not expired and not unclaimed then
      -- The slot and the rate together: both are taken, or neither.
      if not admissible(state, limit_of(own)) or not rate_admits(e, true, true) then break end
    end
    unpark(head)
    local reply
    if expired then
      reply = {'x', head, 0, message(head, e, true)}
    elseif unclaimed then
      reply = {'u', head, e.publishes, message(head, e, true)}
    else
      e.limit = own
      local envelope = message(head, e, false)
      reply = {'p', head, reserve(state, head, e, deadline_ms), envelope}
    end
    for _, v in ipairs(reply) do out[#out + 1] = v end
    done = done + 1
    parked = nil  -- the head was taken: whether another is left is not known
  end
  fit_holder_ttl()
  return state, parked
end
