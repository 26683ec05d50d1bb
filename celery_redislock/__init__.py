"""Distributed locks and fair semaphores for Celery tasks, on Redis.

The primitives (:class:`RedisLock`, :class:`FairSemaphore`) work without
Celery; the task base classes (:class:`LockedTask`, :class:`SemaphoreTask`)
build on them.
"""

from . import signals
from .core.errors import (
    AcquireTimeout,
    LockContended,
    LockError,
    LockLost,
    NotOwned,
    NotReplicated,
    Superseded,
)
from .core.fencing import FencedResource, StaleToken
from .core.heartbeat import HEARTBEAT
from .core.lease import Lease
from .core.leaseset import Holder, Waiter
from .core.lock import RedisLock
from .core.override import Override, Overrides
from .core.rate import RateDecision, RateLimiter
from .core.semaphore import FairSemaphore
from .enqueue.listed_limits import Limit
from .parking import PARKED, PROMOTED, SUPERSEDED, ParkFull, ParkUnclaimed
from .policies import SKIPPED
from .task import LockedTask, RateLimitedTask, SemaphoreTask
from .worker import lifecycle

__all__ = [
    "HEARTBEAT",
    "PARKED",
    "PROMOTED",
    "SKIPPED",
    "SUPERSEDED",
    "AcquireTimeout",
    "FairSemaphore",
    "FencedResource",
    "Holder",
    "Lease",
    "Limit",
    "LockContended",
    "LockError",
    "LockLost",
    "LockedTask",
    "NotOwned",
    "NotReplicated",
    "Override",
    "Overrides",
    "ParkFull",
    "ParkUnclaimed",
    "RateDecision",
    "RateLimitedTask",
    "RateLimiter",
    "RedisLock",
    "SemaphoreTask",
    "StaleToken",
    "Superseded",
    "Waiter",
    "signals",
]
__version__ = "0.1.0"

lifecycle.connect()
