"""Distributed locks and fair semaphores for Celery tasks, on Redis.

The primitives (:class:`RedisLock`, :class:`FairSemaphore`) work without
Celery; the task base classes build on them.
"""

from .errors import AcquireTimeout, LockError, LockLost, NotOwned, NotReplicated
from .heartbeat import HEARTBEAT
from .lease import Lease
from .leaseset import Holder, Waiter
from .lock import RedisLock
from .semaphore import FairSemaphore

__all__ = [
    "HEARTBEAT",
    "AcquireTimeout",
    "FairSemaphore",
    "Holder",
    "Lease",
    "LockError",
    "LockLost",
    "NotOwned",
    "NotReplicated",
    "RedisLock",
    "Waiter",
]
__version__ = "0.1.0"
