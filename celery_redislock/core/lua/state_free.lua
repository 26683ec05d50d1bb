-- state_free.lua: give back the guard of state_hold.lua once the state is
-- written (only by its holder: a guard that expired and was taken by another
-- write is left alone).
-- Standalone (no includes).
-- KEYS[1] guard   STRING  <prefix>:{<name>}:state:<task id> -> holder
-- ARGV[1] holder
-- Returns 1 if given back, 0 if it was not held by ARGV[1].

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
