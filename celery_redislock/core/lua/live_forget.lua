-- live_forget.lua: a dead process's record and index entry go, after its
-- leases were given back (see liveness.py).  Standalone (no includes).
-- KEYS[1] index   as live_register.lua's
-- KEYS[2] record  as live_register.lua's
-- ARGV[1] process "<pid>.<start time>"
-- Returns 1.
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
