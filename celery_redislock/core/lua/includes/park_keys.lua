-- includes/park_keys.lua: the keys of a name's park and what they hold;
-- included by each park helper that reads them and by the park_*.lua scripts
-- (but park_due.lua, park_wake.lua and park_where.lua, which stand alone).
--
-- Parked work of one name lives beside its lease set, under the same hash
-- tag {name}, so one call touches one cluster slot:
--   KEYS[1..7]        the lease set's keys (see includes/lease_set_keys.lua); a *reservation*
--                     is a holder entry "rsv.<task id>" whose score is its
--                     deadline, so it counts against the limit everywhere
--                     (acquire, inspect, purge) and lapses by itself.
--   KEYS[8]  park     ZSET  parked task id -> sequence number (FIFO order)
--   KEYS[9]  parked   HASH  parked task id -> entry (see read_entry())
--   KEYS[10] inflight HASH  reserved task id -> "token|deadline_ms|" .. entry
--                     (published with its promotion token, not yet arrived)
--   KEYS[11] pmeta    HASH  {limit = last limit seen, seq = last sequence number,
--                     and for a debounced name (park_call.lua, debounce_ms):
--                     hold = Redis time (ms) before which its parked run is
--                     not promoted, dfirst = when the first call of the
--                     burst was parked; lhold = Redis time (ms) before
--                     which it is not promoted either, for the listed limit
--                     lwait (park_head.lua; park_unhold.lua lifts it),
--                     lhead = "<ms>|<task id>": when that head, first in
--                     the park, may go alone under a longer lhold
--                     (park_head.lua sets it, rate_admits.lua reads it;
--                     cleared by its promotion, park_unhold.lua, a new
--                     hold, hold_for_limit.lua);
--                     head = the task park_head.lua
--                     put back ahead of the park: a run
--                     that paused or retries, which a keep_latest call does
--                     not replace unless it supersedes; back =
--                     "<fencing token>|<task id>": the last keep_latest run
--                     a listed limit refused that park_head.lua put back
--                     (ARGV[14]), replaceable}
--   KEYS[12] tokens   ZSET  the fate of promotion tokens no longer in flight,
--                     member "s|<task id>|<token>" (stale: superseded, that
--                     copy never runs: a reservation that went overdue and
--                     was re-published with a new token, a publish its
--                     caller cancelled, the newer copy when an older one
--                     claimed first, a claim sent back to the park) or
--                     "c|<task id>|<token>" (claimed: a second copy is a
--                     duplicate), scored by the Redis time (ms) until which
--                     it is kept: STALE_MEMORY_MS (a copy the broker gives
--                     back late, after kombu's visibility timeout), and
--                     CLAIMED_MEMORY_MS for at most CLAIMED_KEPT claims (a
--                     duplicate publish arrives about when the original
--                     does).  A token in none of these is unknown (the lock
--                     Redis lost its data): the caller admits that copy.
--   KEYS[13] rate     STRING  the name's rate state (see includes/gcra.lua): a
--                     parked entry with a rate is promoted only when its
--                     rate admits it, and takes its units then
--   KEYS[14] pause    STRING  present while the name's starts are paused
--   KEYS[15] started  STRING  the schedule of the name's starts (start_delay()
--                     in includes/gcra.lua): a run waits that long before its
--                     body starts, so starts keep the rate, not only admissions
--   KEYS[16] msgs     HASH  task id -> its stored message (the envelope, opaque
--                     JSON, about 2 KB), for every id in PARKED or INFLIGHT:
--                     written when the task is parked or reserved with a
--                     message (entry_string()), read only to hand it out (a
--                     promotion, a drop, an expired or unclaimed task, a
--                     listing: message()) and deleted when the id is in
--                     neither; the key goes when the name has nothing parked
--                     or in flight (next_due()).  So the entries that
--                     promotion reads and rewrites stay small.
--   KEYS[17] index    ZSET  name -> Redis time (ms) at which the sweeper should
--                     look at the name.  Only on a single server: on a
--                     cluster it lives in another slot, so it is left out of
--                     KEYS and the caller updates it from the reply.  A
--                     name whose time becomes the index's earliest is
--                     published on the channel <index>:wake (next_due()).
--   KEYS[18] total    STRING  tasks parked over all names (single server only,
--                     like the index; redislock_park_max_total needs it).
--   KEYS[19] held     ZSET  the index of held names (HELD of includes/lease_set_keys.lua;
--                     single server only)
--   KEYS[20] revoked  STRING  the revoke record of the task a claim or an
--                     arrival is about (<prefix>:park-revoked:<task id>,
--                     parking/admin.py revoke()): passed to park_claim.lua
--                     and park_arrive.lua on a single server only; on a
--                     cluster it lives in another slot, and the caller
--                     reads it first.
-- ARGV[1] is always the name (the index member).
-- Times are Redis TIME (NOW_MS of includes/now.lua); expires_ms = 0 means never.

--- @include "includes/lease_set_keys"

local PARK, PARKED, INFLIGHT, PMETA, TOKENS, RATE, PAUSE, STARTED
local MSGS, INDEX, TOTAL, REVOKE_RECORD, PNAME
--- @per_call begin
PARK, PARKED, INFLIGHT, PMETA = KEYS[8], KEYS[9], KEYS[10], KEYS[11]
TOKENS, RATE, PAUSE, STARTED = KEYS[12], KEYS[13], KEYS[14], KEYS[15]
MSGS = KEYS[16]
INDEX, TOTAL = KEYS[17], KEYS[18]
HELD = KEYS[19]
REVOKE_RECORD = KEYS[20]
PNAME = ARGV[1]
--- @per_call end
