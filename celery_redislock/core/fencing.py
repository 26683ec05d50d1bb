"""Fencing tokens, the storage side: a resource that refuses stale lock holders.

A lock lease can be lost while its holder still runs: a GC pause, SIGSTOP, a
partition or a Redis restart longer than the TTL, after which another client
is granted the lock.  The heartbeat tells the old holder (``owned()`` turns
False, ``on_lost`` runs) but it may already be past its last check.  Only the
resource itself can make that safe, by checking the lock's fencing token.

:class:`FencedResource` is that check for a value kept in Redis, and the
pattern to copy for any other store (a SQL row: ``UPDATE ... SET value = %s,
fence = %s WHERE id = %s AND fence <= %s``)::

    lock = RedisLock(redis_client, "report:42", ttl=30)
    report = FencedResource(store_client, "report:42:data")
    with lock:
        current = report.read(lock.token)       # claim; StaleToken if superseded
        if not report.write(lock.token, render(current)):
            ...                                 # refused: a newer holder took over

Rules (one Lua script per call, ``lua/fenced_write.lua`` and ``fenced_claim.lua``, so each
call is atomic):

* a call with token ``t`` is accepted iff ``t`` is at least the highest token
  the resource has seen, and then raises that mark to ``t``;
* so once a newer holder has *read or written* the resource, every older
  holder is refused, however late it wakes up, and a holder may read and
  write as often as it likes with its own token;
* tokens of :class:`~celery_redislock.RedisLock` strictly increase per lock
  name, also across a Redis restart, so the newest holder always wins.

Read with :meth:`FencedResource.read` (not a plain GET) before a
read-modify-write: the claim is what stops an older holder from writing a
value computed before the newer holder's read (a lost update).

``guard=lock`` (the lock or semaphore whose tokens are used, kept in the
same Redis as the resource) also refuses the tokens of holders a newer call
superseded (``lock_supersede``): a superseded run that goes on writing after
it was told to stop changes nothing, even before the newer run touched the
resource.  On a cluster the resource key must then carry the lock's hash tag.

Not guaranteed: fencing across two *different* locks, or a resource kept in
a Redis that itself loses data (keep it in the store you protect, not in the
Redis that holds the locks).
"""

from __future__ import annotations

from typing import Any

from .errors import LockError
from .heartbeat import is_cluster
from .scripts import FENCED_CLAIM, FENCED_WRITE, LuaScript

__all__ = ["Fenced", "FencedResource", "StaleToken"]


class Fenced:
    """Result of a fenced call: ``accepted``, the resource's highest token
    (``fence``) and its value after the call (None if never written)."""

    __slots__ = ("accepted", "fence", "value")

    def __init__(self, accepted: bool, fence: int, value: bytes | None) -> None:
        self.accepted = accepted
        self.fence = fence
        self.value = value

    def __bool__(self) -> bool:
        return self.accepted

    def __repr__(self) -> str:
        return f"<Fenced accepted={self.accepted} fence={self.fence} value={self.value!r}>"


def _check_token(token: object) -> int:
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"fencing token must be an int, got {type(token).__name__}: {token!r}")
    if token < 0:
        raise ValueError(f"fencing token must be >= 0, got {token}")
    return token


class FencedResource:
    """A value in Redis (one hash at ``key``) that only the newest lock holder may change.

    ``client`` is a redis-py client of the store that holds the resource
    (ideally not the Redis that holds the locks: a restart of that one must
    not wipe the fence).  ``key`` is any Redis key name.
    """

    def __init__(self, client: Any, key: str, guard: Any = None) -> None:
        if not callable(getattr(client, "evalsha", None)):
            raise TypeError(f"client must be a redis-py client, got {client!r}")
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty str, got {key!r}")
        self.client = client
        self.key = key
        self._keys = [key]
        if guard is not None:
            info = getattr(getattr(guard, "keys", None), "info", None)
            if not isinstance(info, str):
                raise TypeError(f"guard must be a RedisLock or FairSemaphore, got {guard!r}")
            if is_cluster(client) and client.keyslot(info) != client.keyslot(key):
                raise ValueError(
                    f"on a cluster a guarded resource must share its lock's slot: name it "
                    f"with the hash tag {{{guard.name}}} (e.g. "
                    f"'{guard.keys.prefix}:{{{guard.name}}}:data'), got {key!r}"
                )
            self._keys.append(info)

    def claim(self, token: int) -> Fenced:
        """Announce ``token`` (raise the fence to it) and return the current value.

        Not accepted (and nothing changes) if a higher token was seen.
        """
        return self._call(FENCED_CLAIM, [_check_token(token)])

    def read(self, token: int) -> bytes | None:
        """The current value, read with ``token``; raises :class:`StaleToken`
        if a newer holder has already been here."""
        result = self.claim(token)
        if not result.accepted:
            raise StaleToken(token, result.fence)
        return result.value

    def write(self, token: int, value: bytes | str | int | float) -> Fenced:
        """Store ``value`` if ``token`` is not older than the newest seen.

        The result is falsy when refused (a newer holder took over); the value
        is then unchanged.
        """
        if not isinstance(value, (bytes, str, int, float)) or isinstance(value, bool):
            raise TypeError(f"value must be bytes, str, int or float, got {value!r}")
        return self._call(FENCED_WRITE, [_check_token(token), value])

    def fence(self) -> int:
        """The highest token seen so far (0 if none)."""
        return int(self.client.hget(self.key, "fence") or 0)

    def _call(self, script: LuaScript, args: list[Any]) -> Fenced:
        accepted, fence, current = script(self.client, self._keys, args)
        if isinstance(current, str):
            current = current.encode("utf-8")
        return Fenced(bool(accepted), int(fence), current)


class StaleToken(LockError):
    """A fenced call was refused: a newer lock holder has used the resource."""

    def __init__(self, token: int, fence: int) -> None:
        super().__init__(
            f"fencing token {token} is stale: the resource has seen token {fence} "
            "(a newer holder of the lock took over)"
        )
        self.token = token
        self.fence = fence
