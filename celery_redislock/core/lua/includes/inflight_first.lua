-- The earliest deadline in INFLIGHT as known in this script call: nil
-- unknown, false none (set by reclaim_overdue(), kept by reserve(), forgotten
-- by unreserve()); next_due() reads the hash only when it is unknown.
local inflight_first
--- @per_call begin
inflight_first = nil
--- @per_call end
