-- common.lua: the lease set's keys and helpers; included (--- @include) by
-- acquire.lua, release.lua and park_common.lua.
--
-- One lease set (a lock is a lease set with limit 1) lives in these keys, all
-- sharing the hash tag {name} so they sit in one cluster slot:
--   KEYS[1] holders  ZSET   owner -> lease expiry (Redis TIME, ms)
--   KEYS[2] info     HASH   owner -> "token:acquired_ms:ttl_ms:limit:meta"
--                           plus the field LIMIT_FIELD (see below)
--   KEYS[3] fence    STRING last fencing token handed out for this name
--   KEYS[4] queue    ZSET   waiting owner -> arrival (Redis TIME, us)
--   KEYS[5] qinfo    HASH   waiting owner -> "expiry_ms:ttl_ms:limit:meta"
--   KEYS[6] wake     key prefix; wake .. owner is that waiter's LIST, where a
--                    hand-off pushes the fencing token (BLPOP'd by the waiter),
--                    or NUDGE: "ask again now" (never a token, tokens are > 0)
--   KEYS[7] override HASH   run-time overrides of the name, set by an operator
--                           (override.lua): "limit" replaces the limit of every
--                           caller whose limit is not fixed (see limit_of()),
--                           "interval_us" / "burst" its rate (rate_common.lua);
--                           no TTL: it stays until cleared
-- HELD (not one of the seven: a script that takes it sets it after the
-- include: acquire.lua and release.lua as KEYS[8], park_common.lua as KEYS[19])
--   ZSET name -> the latest lease expiry (Redis TIME, ms) granted or renewed
--   for the name, while it has holders (index_held(), unindex_held()): the
--   index of held names that `celery redislock exporter` reads (its slot
--   gauges).  Hash tag {held:index}, so only on a single
--   server; the Celery layer passes it, a bare RedisLock / FairSemaphore does
--   not (see index_held()).
-- Every key but `override` carries a TTL no later than the last lease or
-- waiter in it, and empty aggregates vanish, so an idle name leaves only
-- `fence` behind, and that for FENCE_MEMORY_MS (and an override an operator set).
--
-- THE INVARIANT: no holder ever shares the name with more holders than its
-- own limit allows (a lock holder, limit 1, is always alone), whatever limits
-- the other callers of the same name pass.  So each holder's and waiter's
-- limit is stored with it, a caller with limit L is admitted only while
--   holders < min(L, the limit of every current holder),
-- and waiters are handed slots each by its own limit, in arrival order: a waiter
-- that cannot be admitted yet stops the hand-off (nobody barges past it).
-- Lowering a limit is therefore safe at any time: newcomers with the lower
-- limit wait until the holders are few enough.
--
-- LIMIT_FIELD in the info hash caches a lower bound of the current holders'
-- limits: every grant lowers it to the new holder's limit (set to it when
-- the holders were empty), releases leave it alone.  A bound that is too low
-- is only conservative; it is recomputed from the entries when it is what
-- refuses an admission.  So the common case (one limit per name) reads one
-- hash field and never recomputes.
--
-- Every info and qinfo entry stores its limit as its caller passed it (add_holder()
-- below and acquire.lua write them; the park scripts add holders through
-- add_holder()), and every comparison resolves it (limit_of()): so a run-time
-- override applies to the holders already in, and a raised limit fills its
-- new slots at once.  override.lua drops LIMIT_FIELD, which it may have
-- made too high.
--
-- Waiters: a queue entry's expiry is the latest time the waiter promised to
-- ask again plus a grace of half its wait lease (wait_lease(ttl) below); a
-- waiter that dies while queued lapses then and is skipped by hand-offs.  A
-- waiter is told to ask again (NUDGE) when a hand-off makes a holder whose
-- lease ends before the waiter would ask again by itself, so that a waiter
-- never sleeps past the earliest holder's lease (e.g. a slot handed to a
-- waiter that has just died comes back within that waiter's ttl).

local HOLDERS, INFO, FENCE, QUEUE, QINFO, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local OVERRIDE = KEYS[7]
local HELD  -- set by the including script when the caller passes the index
local FENCE_MEMORY_MS = 600000
local LIMIT_FIELD = ':limit'  -- owners never contain ':' (see leaseset.py)
-- SUPERSEDED_FIELD in the info hash: "<token>|<task id>": every holder whose
-- token is at most <token> was superseded by that task's call
-- (lock_supersede: park_enqueue.lua ARGV[22]); refresh.lua reports it, and
-- the field goes with the info hash when the last holder leaves.
local SUPERSEDED_FIELD = ':superseded'
local MIN_WAIT_LEASE_MS = 1000
local NUDGE = '0'

local t = redis.call('TIME')
local NOW_MS = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- The limit a caller's limit argument stands for: > 0 a semaphore's limit,
-- which the name's run-time override replaces when one is set; < 0 a fixed
-- limit, -raw (a lock: one holder, whatever an override says).  So an
-- operator can raise or lower a semaphore's limit without a deploy, and the
-- invariant below holds with the limits as resolved here (each holder stores
-- its resolved limit).
local override_limit  -- read once per script call (0: no override)
local function limit_of(raw)
  if raw < 0 then return -raw end
  if override_limit == nil then
    override_limit = tonumber(redis.call('HGET', OVERRIDE, 'limit') or '0')
  end
  if override_limit > 0 then return override_limit end
  return raw
end

-- Fencing token: strictly greater than the last one issued for this name
-- and never below Redis time in microseconds, so tokens keep increasing even
-- after the fence key expired or a restart lost it (as long as the server
-- clock does not step back by more than the time that passed).
-- One call in the common case: SET ... GET stores Redis time and returns the
-- previous token; only if that was not below it (same microsecond, clock
-- stepped back) is the token set again to last + 1.
local function next_token()
  local last = tonumber(redis.call('SET', FENCE, NOW_US, 'PX', FENCE_MEMORY_MS, 'GET') or '0')
  if last < NOW_US then return NOW_US end
  redis.call('SET', FENCE, string.format('%d', last + 1), 'PX', FENCE_MEMORY_MS)
  return last + 1
end

local function remove_members(zset, hash, members)
  for i = 1, #members, 1000 do
    local chunk = {}
    for j = i, math.min(i + 999, #members) do chunk[#chunk + 1] = members[j] end
    redis.call('ZREM', zset, unpack(chunk))
    redis.call('HDEL', hash, unpack(chunk))
  end
end

-- Drop holders whose lease expired by Redis time; returns how many.
-- (The LIMIT_FIELD bound stays valid: fewer holders can only raise the minimum.)
-- Once per script call: NOW_MS does not move and every holder added since
-- expires after it, so a second look would find nothing.
local purged = false
local function purge_expired_holders()
  if purged then return 0 end
  purged = true
  local dead = redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', NOW_MS)
  if #dead > 0 then remove_members(HOLDERS, INFO, dead) end
  return #dead
end

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

-- The limit of a holder, from its info entry (stored as passed, resolved
-- now); 1 if the entry is missing (its info key was deleted: counted as a
-- lock holder, which only delays others).
local function entry_limit(info)
  if not info then return 1 end
  return limit_of(tonumber(string.match(info, '^%d+:%d+:%d+:(%-?%d+):')))
end

-- Exact minimum of the current holders' limits, stored in LIMIT_FIELD.
local function recompute_holders_limit()
  local owners = redis.call('ZRANGE', HOLDERS, 0, -1)
  local low = math.huge
  for i = 1, #owners, 1000 do
    local chunk = {}
    for j = i, math.min(i + 999, #owners) do chunk[#chunk + 1] = owners[j] end
    local infos = redis.call('HMGET', INFO, unpack(chunk))
    for k = 1, #chunk do low = math.min(low, entry_limit(infos[k])) end
  end
  if low < math.huge then redis.call('HSET', INFO, LIMIT_FIELD, low) end
  return low
end

-- Admission state of the current holders: their count and a lower bound of
-- their limits (read lazily, at most once per script).
local function holder_state()
  return {n = redis.call('ZCARD', HOLDERS), bound = nil, exact = false}
end

-- May a caller with `limit` become a holder beside the current ones?
local function admissible(state, limit)
  if state.n >= limit then return false end
  if state.n == 0 then return true end
  if state.bound == nil then
    state.bound = tonumber(redis.call('HGET', INFO, LIMIT_FIELD) or '0')
    if state.bound == 0 then  -- missing (the info key was deleted): compute it
      state.bound, state.exact = recompute_holders_limit(), true
    end
  end
  if state.n < state.bound then return true end
  if not state.exact then
    state.bound, state.exact = recompute_holders_limit(), true
    return state.n < state.bound
  end
  return false
end

-- List the name in HELD until `expiry_ms` at least (never earlier: GT); a
-- release that leaves no holder takes it out (unindex_held()).  So the
-- index holds the names with a lease that may be live, and a name costs one
-- ZADD per grant or renewal and one ZREM when it empties.  Names left by
-- holders that died (their leases ended unreleased) are dropped when a name
-- enters with a token divisible by 16 (amortised; readers skip them by their
-- score meanwhile).  The name is the hash tag of HOLDERS (names and prefixes
-- never contain braces: keys.py).
local function index_held(expiry_ms, token)
  if not HELD then return end
  if redis.call('ZADD', HELD, 'GT', expiry_ms, string.match(HOLDERS, '{([^}]*)}')) == 1
      and token % 16 == 0 then
    redis.call('ZREMRANGEBYSCORE', HELD, '-inf', '(' .. NOW_MS)
  end
end

local function unindex_held()
  if HELD then redis.call('ZREM', HELD, string.match(HOLDERS, '{([^}]*)}')) end
end

-- Make `owner` a holder with its limit as passed (`raw`, stored so that an
-- override applies to it later; the caller checked admissible(state,
-- limit_of(raw))).
local function add_holder(state, owner, ttl_ms, raw, meta)
  local token = next_token()
  local bound = limit_of(raw)
  if state.n > 0 then bound = math.min(state.bound or recompute_holders_limit(), bound) end
  redis.call('ZADD', HOLDERS, NOW_MS + ttl_ms, owner)
  redis.call('HSET', INFO, owner, string.format('%d:%d:%d:%d:', token, NOW_MS, ttl_ms, raw) .. meta,
    LIMIT_FIELD, bound)
  index_held(NOW_MS + ttl_ms, token)
  state.n, state.bound = state.n + 1, bound
  return token
end

-- How long a queue entry of a waiter with this ttl lives unrenewed: its ttl
-- (so a dead waiter is skipped about as soon as a dead holder's slot frees),
-- at least MIN_WAIT_LEASE_MS, at most max_ms.
local function wait_lease(ttl_ms, max_ms)
  return math.min(max_ms, math.max(ttl_ms, MIN_WAIT_LEASE_MS))
end

-- A queue entry as expiry_ms, ttl_ms, limit (as passed), meta.
local function parse_qinfo(entry)
  local expiry, ttl_ms, limit, meta = string.match(entry, '^(%d+):(%d+):(%-?%d+):(.*)$')
  return tonumber(expiry), tonumber(ttl_ms), tonumber(limit), meta
end

-- The first waiter in arrival order whose wait lease is still alive;
-- lapsed waiters met on the way are removed.  Returns owner, qinfo or nil.
local function live_head()
  while true do
    local head = redis.call('ZRANGE', QUEUE, 0, 0)[1]
    if not head then return nil end
    local entry = redis.call('HGET', QINFO, head)
    if entry and tonumber(string.match(entry, '^(%d+)')) > NOW_MS then
      return head, entry
    end
    remove_members(QUEUE, QINFO, {head})
    redis.call('DEL', WAKE .. head)
  end
end

-- Absolute expiry (ms) of the earliest-expiring holder, or nil.
local function earliest_expiry()
  local first = redis.call('ZRANGE', HOLDERS, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) end
  return nil
end

-- Hand free slots to live waiters in arrival order, each admitted by its
-- own limit (see THE INVARIANT); stop at the first that cannot be admitted.
-- Each waiter handed a slot becomes a holder and gets its fencing token pushed
-- onto its wake list.  If a waiter is left at the head and would sleep past
-- the earliest lease now held, it is nudged (unless it is `asker`, the
-- caller of this script, which learns the new expiry from the reply).
-- Returns how many were handed a slot
-- and the live waiter left at the head (nil if none): while there is one, no
-- newcomer may be granted a slot.
local function hand_off(state, wake_ms, asker)
  local promoted = 0
  while true do
    local head, entry = live_head()
    if not head then return promoted, nil end
    local expiry, ttl_ms, limit, meta = parse_qinfo(entry)
    if not admissible(state, limit_of(limit)) then
      -- It asks again by itself at expiry - wait_lease/2 (see acquire.lua).
      local first = earliest_expiry()
      if promoted > 0 and first and head ~= asker
          and expiry - math.floor(wait_lease(ttl_ms, wake_ms) / 2) > first then
        redis.call('RPUSH', WAKE .. head, NUDGE)
        redis.call('PEXPIRE', WAKE .. head, wake_ms)
      end
      return promoted, head
    end
    remove_members(QUEUE, QINFO, {head})
    local token = add_holder(state, head, ttl_ms, limit, meta)
    redis.call('RPUSH', WAKE .. head, string.format('%d', token))
    redis.call('PEXPIRE', WAKE .. head, wake_ms)
    promoted = promoted + 1
  end
end

-- Give back `owner`'s slot or queue place and hand the freed slot to the
-- next live waiter(s), each by its own limit (release.lua, and the park
-- policy's release, which then promotes parked work in the same call).
-- `fit_later`: the caller calls fit_holder_ttl() itself after more changes.
-- Returns 1 if `owner` held an unexpired slot, else 0.
local function release_owner(owner, wake_ms, fit_later)
  local mine = redis.call('ZSCORE', HOLDERS, owner)
  local held = 0
  if mine then
    if tonumber(mine) > NOW_MS then held = 1 end
    if redis.call('EXISTS', QUEUE) == 0 and redis.call('ZCARD', HOLDERS) == 1 then
      -- Fast path: we were the only holder and nobody waits, so there is
      -- nothing to hand over or tidy: drop both holder keys.  (A wake list of
      -- ours that still holds an unread hand-off expires by itself.)
      redis.call('DEL', HOLDERS, INFO)
      unindex_held()
      return held
    end
    remove_members(HOLDERS, INFO, {owner})
  end

  if redis.call('EXISTS', QUEUE, HOLDERS) == 0 then
    redis.call('DEL', INFO)  -- only LIMIT_FIELD can be left in it
    unindex_held()
    return held
  end

  -- A holder is never also queued (hand_off() dequeues whom it grants; a
  -- direct grant happens only when no live waiter is queued), so only a
  -- non-holder can have a queue place to give back.
  if not mine and redis.call('ZSCORE', QUEUE, owner) then
    remove_members(QUEUE, QINFO, {owner})
  end
  redis.call('DEL', WAKE .. owner)
  purge_expired_holders()
  hand_off(holder_state(), wake_ms)
  if not fit_later then fit_holder_ttl() end
  return held
end
