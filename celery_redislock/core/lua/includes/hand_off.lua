--- @include "includes/add_holder"
--- @include "includes/admissible"
--- @include "includes/earliest_expiry"
--- @include "includes/lease_set_keys"
--- @include "includes/limit_of"
--- @include "includes/live_head"
--- @include "includes/parse_qinfo"
--- @include "includes/remove_members"
--- @include "includes/wait_lease"

local NUDGE = '0'  -- a wake list's "ask again now" (tokens are > 0)

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
