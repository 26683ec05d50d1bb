"""A fair counting semaphore: at most ``limit`` holders of one name."""

from __future__ import annotations

from .leaseset import LeaseSet

__all__ = ["FairSemaphore"]


class FairSemaphore(LeaseSet):
    """The fair semaphore of *Redis in Action* 6.3, redone.

    ::

        slots = FairSemaphore(redis.Redis(), "account:7", limit=5, ttl=30)
        if slots.acquire():              # non-blocking by default
            try:
                sync()
            finally:
                slots.release()

    Guarantees:

    * never more than ``limit`` unexpired holders, under any interleaving:
      each operation is one Lua script, and expiry is judged by Redis time,
      so a client clock that is off by hours neither steals slots nor loses
      its own;
    * callers of the same name with different limits (or a ``RedisLock``)
      never put a holder among more holders than its own limit: a caller is
      admitted only while the holders are fewer than its limit and every
      holder's limit, so lowering a limit takes effect at once for newcomers
      and never lets anyone run above it (see :mod:`~celery_redislock.core.leaseset`);
    * expired holders are purged inside acquire; ``refresh()`` never revives
      a slot that already expired;
    * holders are tracked by owner, not counted, so a crashed holder's slot
      comes back when its lease expires (no permit leaks);
    * blocking acquires queue first-come, first-served and are handed freed
      slots by the release;
    * each slot has a fencing token, strictly increasing per name;
    * an idle semaphore leaves no keys but the fence counter (10 minutes).

    ``blocking_timeout`` (default 0: do not wait) is what ``with slots:``
    and a bare ``acquire()`` wait (``acquire(blocking=True)`` without a
    timeout waits ``blocking_timeout`` if that is not 0, else forever); see
    :class:`~celery_redislock.RedisLock` for ``on_lost``, ``meta``
    and ``replicas``.
    """

    _default_blocking_timeout = 0.0

    def locked(self) -> bool:
        """Whether every slot is held (by anyone), from Redis: an acquire now
        would not be granted, by this semaphore's limit or by a holder's own
        (a ``RedisLock`` holding the name is alone; a holder of a lower
        limit admits nobody beside as many holders).  Like
        ``asyncio.Semaphore.locked()``; it says nothing about queued waiters
        nor run-time overrides, and holders may come and go right after."""
        holders = self.holders()
        limits = [h.capacity.slots for h in holders if h.capacity is not None]
        return len(holders) >= min([self.limit, *limits])
