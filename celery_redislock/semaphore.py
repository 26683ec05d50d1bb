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
    * expired holders are purged inside acquire; ``refresh()`` never revives
      a slot that already expired;
    * holders are tracked by owner, not counted, so a crashed holder's slot
      comes back when its lease expires (no permit leaks);
    * blocking acquires queue first-come, first-served and are handed freed
      slots by the release;
    * each slot has a fencing token, strictly increasing per name;
    * an idle semaphore leaves no keys but the fence counter (10 minutes).

    ``blocking_timeout`` (default 0: do not wait) is what ``with slots:``
    waits; see :class:`~celery_redislock.RedisLock` for ``on_lost``, ``meta``
    and ``replicas``.
    """

    _default_blocking = False
    _default_blocking_timeout = 0.0
