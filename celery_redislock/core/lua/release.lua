-- release.lua: give back a slot or a place in the queue, and hand the freed
-- slot to the next live waiter(s), each admitted by its own limit (THE
-- INVARIANT of common.lua; the releaser's limit plays no part).
-- KEYS: the six keys of common.lua.
-- ARGV[1] owner
-- ARGV[2] limit      unused (kept so that the argument list is unchanged)
-- ARGV[3] wake_ms    lifetime of a wake list this hand-off creates, and the
--                    longest wait lease (max_wait_ms of acquire.lua)
-- Returns 1 if `owner` held an unexpired slot (now released), else 0: the
-- lease had expired or been taken, or `owner` was only queued.

local owner, wake_ms = ARGV[1], tonumber(ARGV[3])

local mine = redis.call('ZSCORE', HOLDERS, owner)
local held = 0
if mine then
  if tonumber(mine) > NOW_MS then held = 1 end
  if redis.call('EXISTS', QUEUE) == 0 and redis.call('ZCARD', HOLDERS) == 1 then
    -- Fast path: we were the only holder and nobody waits, so there is
    -- nothing to hand over or tidy: drop both holder keys.  (A wake list of
    -- ours that still holds an unread hand-off expires by itself.)
    redis.call('DEL', HOLDERS, INFO)
    return held
  end
  remove_members(HOLDERS, INFO, {owner})
end

if redis.call('EXISTS', QUEUE, HOLDERS) == 0 then
  redis.call('DEL', INFO)  -- only LIMIT_FIELD can be left in it
  return held
end

-- A holder is never also queued (promote() dequeues whom it grants; a
-- direct grant happens only when no live waiter is queued), so only a
-- non-holder can have a queue place to give back.
if not mine and redis.call('ZSCORE', QUEUE, owner) then
  remove_members(QUEUE, QINFO, {owner})
end
redis.call('DEL', WAKE .. owner)
purge_expired_holders()
promote(holder_state(), wake_ms)
fit_holder_ttl()
return held
