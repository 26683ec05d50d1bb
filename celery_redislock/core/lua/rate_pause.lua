-- rate_pause.lua: pause the starts of a name for a while, or resume them.
-- A pause only ever lengthens: a shorter pause than the one running leaves
-- it as it is (two workers told "retry after 30 s" and "after 10 s" both
-- wait 30 s).
-- KEYS[1] pause   STRING  the name's pause (see includes/gcra.lua)
-- ARGV[1] ms      how long from now (Redis time); "0": resume at once
-- Returns the pause left, in milliseconds (0: not paused).

--- @include "includes/extend_pause"

local ms = tonumber(ARGV[1])
if ms <= 0 then
  redis.call('DEL', KEYS[1])
  return 0
end
return extend_pause(KEYS[1], ms)
