"""The ``park`` contention policy, Celery side: contended tasks wait in Redis, not in the broker.

See docs/park.md for the state machine.  The Redis side is
:mod:`celery_redislock.core.park` (one Lua call per operation, no Celery);
this package is split by where each part runs:

==============  ===============================  =================================
module          runs in                          does
==============  ===============================  =================================
``enqueue``     the caller (``apply_async``)     park, reserve or refuse at publish
``arrival``     the pool child                   claim a reservation, or admit /
                                                 park a message without one
``promotion``   the releasing child, the         fill freed slots and re-publish
                worker's main process            the stored messages
``sweeper``     the worker's main process        overdue reservations, dead
                                                 holders, due names, every interval
``admin``       the CLI, user code               revoke, discard, status
``message``     (shared)                         the stored message and its publish
``states``      (shared)                         ``PARKED`` etc., errors
==============  ===============================  =================================

Guaranteed (single Redis): a parked task is published only with a
reservation, so at most ``limit`` tasks of a name are held, reserved or in
the broker through this path; a reservation lapses at its deadline and is
re-published; a copy with a stale token never runs.  Not guaranteed: parked
tasks survive the loss of the lock Redis (a warning at worker start says so
when it persists nothing); custom priorities within a name (the park is
FIFO).
"""

from __future__ import annotations

from .admin import discard, revoke, status
from .states import PARKED, PROMOTED, SUPERSEDED, ParkFull, ParkUnclaimed, StillPending

__all__ = [
    "PARKED",
    "PROMOTED",
    "SUPERSEDED",
    "ParkFull",
    "ParkUnclaimed",
    "StillPending",
    "discard",
    "revoke",
    "status",
]
