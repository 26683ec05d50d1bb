--- @include "includes/read_entry"
--- @include "includes/split"

-- An in-flight reservation: its token, its deadline and the parked entry.
local function read_inflight(raw)
  local f = split(raw, 3)
  local e = read_entry(f[3])
  e.token, e.deadline_ms = f[1], tonumber(f[2])
  return e
end
