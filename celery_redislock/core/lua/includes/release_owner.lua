--- @include "includes/fit_holder_ttl"
--- @include "includes/hand_off"
--- @include "includes/holder_state"
--- @include "includes/lease_set_keys"
--- @include "includes/now"
--- @include "includes/purge_expired_holders"
--- @include "includes/remove_members"
--- @include "includes/unindex_held"

-- Give back `owner`'s slot or queue place and hand the freed slot to the
-- next live waiter(s), each by its own limit (release.lua, and the park
-- policy's release, which then promotes parked work in the same call).  The
-- holder keys' TTLs are fitted when a waiter was handed a slot: a removal
-- only shortens the latest lease they must outlive, a grant may lengthen it.
-- Returns 1 if `owner` held an unexpired slot, else 0; and false if no
-- waiter is queued on the name now, nothing (nil) when waiters were
-- queued or handed a slot, so that a caller that looks at the queue next
-- need not read it again when it is known empty.
local function release_owner(owner, wake_ms)
  local mine = redis.call('ZSCORE', HOLDERS, owner)
  local held = 0
  if mine then
    if tonumber(mine) > NOW_MS then held = 1 end
    local queued = redis.call('EXISTS', QUEUE) == 1
    if not queued and redis.call('ZCARD', HOLDERS) == 1 then
      -- Fast path: we were the only holder and nobody waits, so there is
      -- nothing to hand over or tidy: drop both holder keys.
      redis.call('DEL', HOLDERS, INFO)
      unindex_held()
      return held, false
    end
    remove_members(HOLDERS, INFO, {owner})
    -- Other holders are left, or waiters.  A holder is never also queued
    -- (hand_off() dequeues whom it grants; a direct grant happens only when no
    -- live waiter is queued), and a wake list of ours that still holds an
    -- unread hand-off expires by itself: with nobody waiting, nothing is
    -- handed over.
    if not queued then return held, false end
  else
    if redis.call('EXISTS', QUEUE, HOLDERS) == 0 then
      redis.call('DEL', INFO)  -- only LIMIT_FIELD can be left in it
      unindex_held()
      return held, false
    end
    if redis.call('ZSCORE', QUEUE, owner) then remove_members(QUEUE, QINFO, {owner}) end
    redis.call('DEL', WAKE .. owner)
  end
  purge_expired_holders()
  if hand_off(holder_state(), wake_ms) > 0 then fit_holder_ttl() end
  return held
end
