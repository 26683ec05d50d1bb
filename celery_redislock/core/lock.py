"""A distributed mutual-exclusion lock with fencing tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .keys import DEFAULT_PREFIX
from .lease import LostCallback
from .leaseset import LeaseSet

__all__ = ["RedisLock"]


class RedisLock(LeaseSet):
    """A lock on ``name``: at most one holder at a time.

    ::

        lock = RedisLock(redis.Redis(), "report:42", ttl=30)
        with lock:                       # waits, FIFO, woken by the release
            write_report(fence=lock.token)

    Guarantees (single Redis primary):

    * at most one unexpired lease per name, checked by Redis time: client
      clocks play no part; also against a ``FairSemaphore`` of the same name
      (a lock holder is always alone, see :mod:`~celery_redislock.core.leaseset`);
    * acquire and release are one Lua script (one round trip) each; only the
      acquisition's random 128-bit owner id can release or refresh;
    * ``token`` strictly increases with every acquisition of the name, also
      across expiry of the fence key and a restart of Redis (see keys.py);
    * waiters are served first-come, first-served and woken by the release
      (no polling); a lost wake-up, or a waiter that died after being handed
      the lock, delays the next waiter by at most that holder's lease;
    * ``acquire()`` returning True means a lease of a full ``ttl`` from the
      grant, also for a waiter that was handed the lock after a long wait;
    * the per-process heartbeat renews the lease every ttl/3 while held,
      so the TTL only matters when the holder dies or stalls; a loss is
      reported through ``owned()``, ``on_lost`` and a warning; a lock object
      garbage-collected while held is no longer renewed (a warning names
      it) and expires within its ttl;
    * after release nothing is left in Redis but the ``fence`` counter,
      which expires 10 minutes after the last acquisition.

    Not guaranteed: exclusion against a holder that stalled (GC pause,
    SIGSTOP, partition) longer than its TTL, or across a failover that lost
    the lease.  The protected resource must reject writes whose fencing token
    is lower than one it has seen.

    ``blocking_timeout`` is what ``with lock:`` and a bare ``acquire()``
    wait (None: forever; 0: do not wait), as in redis-py's ``Lock``.
    ``on_lost(lease)`` is called, from the heartbeat thread, when
    a held lease is found lost.  ``meta`` is stored with the lease for
    inspection (host and pid are added).  ``owner_prefix`` starts every owner
    id of this instance (for finding a dead holder's leases, e.g. by task id).
    ``replicas=N`` makes ``acquire`` wait (``replica_timeout`` s) until N
    replicas acknowledged the grant, else give it back and raise
    :class:`~celery_redislock.NotReplicated` (see ``replication.py``).
    """

    _default_blocking_timeout = None
    kind = "lock"  # a run-time override of the name never makes a lock shared

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        ttl: float = 30.0,
        prefix: str = DEFAULT_PREFIX,
        blocking_timeout: float | object | None = ...,
        on_lost: LostCallback | None = None,
        meta: Mapping[str, Any] | None = None,
        owner_prefix: str = "",
        replicas: int = 0,
        replica_timeout: float = 1.0,
        index: bool = False,
    ) -> None:
        super().__init__(
            client,
            name,
            1,
            ttl=ttl,
            prefix=prefix,
            blocking_timeout=blocking_timeout,
            on_lost=on_lost,
            meta=meta,
            owner_prefix=owner_prefix,
            replicas=replicas,
            replica_timeout=replica_timeout,
            index=index,
        )

    def locked(self) -> bool:
        """Whether anyone (this instance or another) holds the lock, from Redis."""
        return bool(self.holders())
