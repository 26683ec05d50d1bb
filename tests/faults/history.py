"""The history: every event of every client and of the fault injector.

Events are appended, stamped with Redis ``TIME``, by one Lua script to one
list in the *recording* Redis, a server that no fault touches (the Redis
under test is killed, paused and restarted; a history kept there would be
lost with it).  Both servers run on this machine, so their ``TIME`` is the
same clock, and that clock is never skewed (only a client's view of
``time.time`` is, see ``client.py``).

An event is a JSON object with ``t`` (Redis time, float seconds), ``c``
(client id, or ``"inj"`` for the injector), ``e`` (type) and fields per type.
"""

from __future__ import annotations

import json
from typing import Any

from celery_redislock.core.scripts import LuaScript

HISTORY_KEY = "faults:history"
HOLDING_KEY = "faults:holding"  # HASH client id -> JSON of what it holds now
STOP_KEY = "faults:stop"

# KEYS[1] history LIST, KEYS[2] holding HASH
# ARGV[1] event JSON without "t" (an object; "t" is added here)
# ARGV[2] client id, ARGV[3] "" (leave holding alone), "-" (clear) or JSON to set
# Returns the Redis time stamped on the event, as "sec.usec".
_RECORD = LuaScript(
    "record",
    """
local t = redis.call('TIME')
local ts = t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
redis.call('RPUSH', KEYS[1], '{"t": ' .. ts .. ', ' .. string.sub(ARGV[1], 2))
if ARGV[3] == '-' then
  redis.call('HDEL', KEYS[2], ARGV[2])
elseif ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
end
return ts
""",
)


class Recorder:
    """Appends events of one client (or the injector) to the history."""

    def __init__(self, client: Any, who: str) -> None:
        self.client = client
        self.who = who

    def __call__(self, event: str, holding: str = "", **fields: Any) -> float:
        body = json.dumps({"c": self.who, "e": event, **fields}, sort_keys=True)
        stamp = _RECORD(self.client, [HISTORY_KEY, HOLDING_KEY], [body, self.who, holding])
        return float(stamp)


def load(client: Any) -> list[dict[str, Any]]:
    """The whole history, in recording order."""
    return [json.loads(raw) for raw in client.lrange(HISTORY_KEY, 0, -1)]
