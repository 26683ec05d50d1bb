-- rate_acquire.lua: one start of a rate-limited name, if its rate admits it.
-- KEYS[1] rate    STRING  the name's TAT (see includes/gcra.lua)
-- KEYS[2] pause   STRING  the name's pause
-- KEYS[3] override HASH   the name's run-time override (its rate replaces ARGV's)
-- ARGV[1] interval_us  period / count, in microseconds (may be fractional)
-- ARGV[2] burst        how many units may start back to back (>= 1)
-- ARGV[3] cost         units this start takes (1 <= cost <= burst)
-- ARGV[4] take         "1": take the units when admitted; "0": only tell
-- Returns {1, 0} when admitted, else {0, wait_us}: microseconds until a start
-- of this cost would be admitted (a pause counts).

--- @include "includes/gcra"
--- @include "includes/now"
--- @include "includes/rate_terms"

local interval, burst, cost = rate_terms(KEYS[3], tonumber(ARGV[1]), tonumber(ARGV[2]),
  tonumber(ARGV[3]))
local ok, wait = gcra(KEYS[1], KEYS[2], NOW_US, interval, burst, cost, ARGV[4] == '1', 0)
if ok then return {1, 0} end
return {0, wait}
