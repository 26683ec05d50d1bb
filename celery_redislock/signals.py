"""Celery-style signals for metrics and alerting.

All are :class:`celery.utils.dispatch.Signal`; ``sender`` is the task
object.  Receivers run synchronously in the process that sends, and an
exception in a receiver is logged, never raised into the task.

=================  ===========================================================
``lock_acquired``  a task took its lock/slot, before its body runs.
                   kwargs: ``task_id``, ``name``, ``token``, ``kind``
                   (``"lock"`` or ``"semaphore"``), ``waited`` (seconds)
``lock_contended`` a task met the lock held / semaphore full.
                   kwargs: ``task_id``, ``name``, ``kind``, ``policy``
                   (``"skip"``, ``"retry"``, ``"wait"``, ``"raise"``,
                   ``"park"`` for a run a listed limit refused,
                   ``"dedupe"`` and ``"throttle"`` at enqueue,
                   ``"redelivered"`` for a same-id re-run), ``refused_by``
                   (the listed limit of ``limits=`` that refused it,
                   full or over its rate; None when the task's own key did)
``lock_released``  the lock/slot was given back.  kwargs: ``task_id``,
                   ``name``, ``token``, ``kind``, ``reason`` (``"finished"``,
                   ``"retry"``, ``"paused"`` (``redislock_pause``),
                   ``"limit"`` (a ``park`` run's own slot given back when a
                   listed limit, full or over its rate, sent it back to
                   its park; no ``lock_acquired`` came before), or for
                   clean-up by the worker's main process
                   ``"worker lost"``, ``"terminated"``, ``"time limit"``),
                   ``held`` (whether Redis still had it)
``lock_lost``      the heartbeat found the lease gone while the task ran
                   (sent from the heartbeat thread), or the release found
                   it gone first (sent before ``lock_released``).  kwargs: ``task_id``,
                   ``name``, ``token``, ``kind``, ``reason``
``lock_parked``    policy ``park`` stored a task in its name's park list
                   instead of running or publishing it.  kwargs:
                   ``task_id``, ``name``, ``kind``, ``where`` (``"enqueue"``
                   in the caller, ``"arrive"`` in a worker, ``"pause"`` for a
                   run that called ``redislock_pause``, ``"retry"`` for a
                   ``keep_latest`` run's own retry, ``"limit"`` for a run
                   that a listed limit sent back), ``parked`` (park
                   list length after it), ``waits_for`` (the listed limit
                   it waits for, with ``"limit"``; None otherwise)
``lock_dropped``   policy ``park`` gave up a parked or promoted task that never
                   ran (its final state is set: ``REVOKED``, or ``FAILURE``
                   with ``ParkUnclaimed``, or ``SUPERSEDED``).  kwargs:
                   ``task_id``, ``name``, ``kind``, ``reason``
                   (``"expired"``, ``"revoked"``, ``"discarded"``,
                   ``"unclaimed"``, ``"superseded"``: policy
                   ``keep_latest``, which also passes ``superseded_by``, the
                   id of the call that took its place).  ``sender`` is None
                   where the task is not registered
``lock_promoted``  policy ``park`` published a parked task to run (sent where
                   the promotion happened: a releasing run, the sweeper or
                   the main process).  kwargs: ``task_id``, ``name``,
                   ``kind``, ``token``.  ``sender`` is None where the task is
                   not registered
``lock_rate_limited`` a task's start was held back by its key's rate (or a
                   pause): parked until it is due (policy ``park``), or
                   refused by another policy.  kwargs: ``task_id``,
                   ``name``, ``kind``, ``retry_after`` (seconds until the
                   rate admits it), ``where`` (``"enqueue"``, ``"arrive"``,
                   ``"run"``, ``"pause"``)
=================  ===========================================================

``lock_acquired``, ``lock_released`` and ``lock_lost`` are sent once per
lease, each with ``listed``: False for the task's own key, True for a
listed limit of ``limits=`` (kind ``"semaphore"``; a run with two listed
limits sends three ``lock_acquired``).  The worker's metrics count runs,
so they count the own key's only (but ``redislock_lost_total``, which
counts every lease).
"""

from __future__ import annotations

from celery.utils.dispatch import Signal

__all__ = [
    "lock_acquired",
    "lock_contended",
    "lock_dropped",
    "lock_lost",
    "lock_parked",
    "lock_promoted",
    "lock_rate_limited",
    "lock_released",
]

lock_acquired = Signal(
    name="redislock_acquired",
    providing_args={"task_id", "name", "token", "kind", "waited", "listed"},
)
lock_contended = Signal(
    name="redislock_contended", providing_args={"task_id", "name", "kind", "policy", "refused_by"}
)
lock_released = Signal(
    name="redislock_released",
    providing_args={"task_id", "name", "token", "kind", "reason", "held", "listed"},
)
lock_lost = Signal(
    name="redislock_lost",
    providing_args={"task_id", "name", "token", "kind", "reason", "listed"},
)
lock_parked = Signal(
    name="redislock_parked",
    providing_args={"task_id", "name", "kind", "where", "parked", "waits_for"},
)
lock_promoted = Signal(
    name="redislock_promoted", providing_args={"task_id", "name", "kind", "token"}
)
lock_dropped = Signal(
    name="redislock_dropped", providing_args={"task_id", "name", "kind", "reason"}
)
lock_rate_limited = Signal(
    name="redislock_rate_limited",
    providing_args={"task_id", "name", "kind", "retry_after", "where"},
)
