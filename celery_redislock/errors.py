"""The exceptions this library raises.

Connection problems are *not* wrapped: ``redis.exceptions.ConnectionError``
and ``TimeoutError`` propagate as they are, and nothing is considered held
after one (fail closed).
"""

from __future__ import annotations

__all__ = ["AcquireTimeout", "LockError", "LockLost", "NotOwned", "NotReplicated"]


class LockError(Exception):
    """Base class of every lock and semaphore error of this library."""


class NotOwned(LockError):
    """Release or refresh of a lease this object does not hold."""


class LockLost(NotOwned):
    """The lease was held, but expired or was taken before it was released or refreshed.

    Whatever ran under it may have overlapped another holder: use the fencing
    token to make the protected resource reject stale writers.
    """


class AcquireTimeout(LockError):
    """A ``with`` block could not acquire within its ``blocking_timeout``."""


class NotReplicated(LockError):
    """Acquired on the primary, but fewer replicas than asked for (``replicas=N``)
    acknowledged it within ``replica_timeout``; the lease was given back."""
