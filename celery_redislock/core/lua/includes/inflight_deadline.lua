-- The deadline (ms, Redis time) of an in-flight entry as stored,
-- "token|deadline_ms|" .. entry (see read_inflight()), without parsing the
-- rest: the scans of every reservation (reclaim_overdue(), next_due()) need
-- only this of most entries.
local function inflight_deadline(raw)
  return tonumber(string.match(raw, '^[^|]*|(%d+)|'))
end
