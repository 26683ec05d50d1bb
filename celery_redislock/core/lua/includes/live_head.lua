--- @include "includes/lease_set_keys"
--- @include "includes/now"
--- @include "includes/remove_members"

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
