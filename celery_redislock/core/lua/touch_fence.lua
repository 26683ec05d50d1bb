-- touch_fence.lua: re-set the fence key's expiry to what every grant sets it
-- to, a write that changes nothing but replicates after the grant, so that a
-- WAIT sent on the same connection right after it counts the replicas that
-- have the grant (see replication.py).
-- KEYS[1] fence   the lease set's fence key
-- ARGV[1] ms      FENCE_MEMORY_MS of includes/next_token.lua
-- Returns 1 if the fence key exists (a grant was made), else 0.
return redis.call('PEXPIRE', KEYS[1], ARGV[1])
