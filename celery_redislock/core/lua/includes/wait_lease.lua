local MIN_WAIT_LEASE_MS = 1000
-- How long a queue entry of a waiter with this ttl lives unrenewed: its ttl
-- (so a dead waiter is skipped about as soon as a dead holder's slot frees),
-- at least MIN_WAIT_LEASE_MS, at most max_ms.
local function wait_lease(ttl_ms, max_ms)
  return math.min(max_ms, math.max(ttl_ms, MIN_WAIT_LEASE_MS))
end
