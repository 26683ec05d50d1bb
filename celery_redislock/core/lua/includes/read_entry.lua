--- @include "includes/split"

-- A parked task, as stored:
-- "seq|expires_ms|enqueued_ms|limit|publishes|interval_us|burst|cost|task|envelope".
-- limit is the task's own (its call's semaphore_limit when it was parked, as
-- passed: see stored_limit()) and
-- task its task name, so promotion can admit it by its own limit (see
-- own_limit()); publishes counts how often it was published with a token
-- (see promote_parked()); interval_us, burst and cost are its rate (interval
-- 0: none, see rate_admits()); envelope is empty: the message is in MSGS
-- (an entry written before MSGS existed carries it inline; message() reads
-- both, and the next write of the entry moves it to MSGS).
local function read_entry(raw)
  local f = split(raw or '0|0|0|0|0|0|1|1||', 10)
  return {seq = tonumber(f[1]), expires_ms = tonumber(f[2]), enqueued_ms = tonumber(f[3]),
    limit = tonumber(f[4]), publishes = tonumber(f[5]), interval = tonumber(f[6]),
    burst = tonumber(f[7]), cost = tonumber(f[8]), task = f[9], envelope = f[10]}
end
