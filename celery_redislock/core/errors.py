"""The exceptions this library raises.

Connection problems are *not* wrapped: ``redis.exceptions.ConnectionError``
and ``TimeoutError`` propagate as they are, and nothing is considered held
after one (fail closed).
"""

from __future__ import annotations

__all__ = [
    "AcquireTimeout",
    "LockContended",
    "LockError",
    "LockLost",
    "NotOwned",
    "NotReplicated",
    "Superseded",
]


class LockError(Exception):
    """Base class of every lock and semaphore error of this library."""


class NotOwned(LockError):
    """Release or refresh of a lease this object does not hold."""


class LockLost(NotOwned):
    """The lease was held, but expired or was taken before it was released or refreshed.

    Whatever ran under it may have overlapped another holder: use the fencing
    token to make the protected resource reject stale writers.  ``reported``:
    whether the holder was told before (the heartbeat's ``on_lost`` ran).
    """

    def __init__(self, message: str = "", reported: bool = True) -> None:
        super().__init__(message)
        self.reported = reported


class AcquireTimeout(LockError):
    """A ``with`` block could not acquire within its ``blocking_timeout``."""


class LockContended(LockError):
    """A task met its lock (or semaphore) taken and its policy says to fail.

    Raised by the ``raise`` policy, by ``wait`` when its timeout passes, and
    by ``retry`` when its requeue budget is spent.  ``name`` is the lock name,
    ``policy`` the policy that gave up.
    """

    def __init__(self, message: str, name: str = "", policy: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.policy = policy

    def __reduce__(self) -> tuple[type[LockContended], tuple[str, str, str]]:
        return (type(self), (str(self), self.name, self.policy))


class NotReplicated(LockError):
    """Acquired on the primary, but fewer replicas than asked for (``replicas=N``)
    acknowledged it within ``replica_timeout``; the lease was given back."""


class Superseded(LockError):
    """A newer call of the key superseded this holder (``lock_supersede``):
    raised by :meth:`~celery_redislock.core.leaseset.LeaseSet.checkpoint`.
    ``name`` is the lock name, ``by`` the task id of the newer call ("" when
    not known).  The holder should stop; its lease is still held until it
    returns, and a :class:`~celery_redislock.FencedResource` guarded by the
    lock refuses its writes."""

    def __init__(self, name: str = "", by: str = "") -> None:
        super().__init__(f"{name!r}: superseded by a newer call" + (f" ({by})" if by else ""))
        self.name = name
        self.by = by

    def __reduce__(self) -> tuple[type[Superseded], tuple[str, str]]:
        return (type(self), (self.name, self.by))
