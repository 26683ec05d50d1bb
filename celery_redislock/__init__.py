"""Distributed locks and fair semaphores for Celery tasks, on Redis.

The primitives (:class:`RedisLock`, :class:`FairSemaphore`) work without
Celery; the task base classes (:class:`LockedTask`, :class:`SemaphoreTask`)
build on them.
"""

from . import signals
from .errors import (
    AcquireTimeout,
    LockContended,
    LockError,
    LockLost,
    NotOwned,
    NotReplicated,
)
from .fencing import FencedResource, StaleToken
from .heartbeat import HEARTBEAT
from .lease import Lease
from .leaseset import Holder, Waiter
from .lock import RedisLock
from .semaphore import FairSemaphore
from .task import SKIPPED, LockedTask, SemaphoreTask

__all__ = [
    "HEARTBEAT",
    "SKIPPED",
    "AcquireTimeout",
    "FairSemaphore",
    "FencedResource",
    "Holder",
    "Lease",
    "LockContended",
    "LockError",
    "LockLost",
    "LockedTask",
    "NotOwned",
    "NotReplicated",
    "RedisLock",
    "SemaphoreTask",
    "StaleToken",
    "Waiter",
    "signals",
]
__version__ = "0.1.0"
