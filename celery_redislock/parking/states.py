"""What a parked task shows: its states, its exceptions, and how they are recorded.

Every path of a parked task ends in a state of the result backend, a log
line and a signal (docs/park.md, "States"): ``PARKED`` while it waits,
``PROMOTED`` once re-published, then the states of a run, or ``REVOKED``
(expired, revoked, discarded), ``SUPERSEDED`` (``keep_latest``: a newer call
took its place) or ``FAILURE`` (:class:`ParkFull`, :class:`ParkUnclaimed`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from celery.exceptions import Ignore

from .. import signals
from ..core.errors import LockContended
from ..core.park import Admission, ParkConfig, Verdict

__all__ = [
    "PARKED",
    "PROMOTED",
    "SUPERSEDED",
    "ParkFull",
    "ParkUnclaimed",
    "StillPending",
    "announce_parked",
    "announce_superseded",
    "mark_revoked",
    "raise_if_bounded",
    "store_state",
]

log = logging.getLogger("celery_redislock")

PARKED = "PARKED"
#: published again by a promotion, not yet started (its message is in the broker)
PROMOTED = "PROMOTED"
#: final: a newer call of its key took its place in the park (``keep_latest``);
#: ``AsyncResult.info["superseded_by"]`` is the id of that call's task
SUPERSEDED = "SUPERSEDED"


class StillPending(Ignore):  # type: ignore[misc]
    """A run ended without running the body, while the task itself is still to
    run: it was parked at arrival, or it was a copy of a task that is parked or
    in flight.  Its enqueue marker (``lock_dedupe``) stays: it is not done."""


class ParkFull(LockContended):
    """A park bound is reached: the name's (``redislock_park_max``) or the one over
    all names (``redislock_park_max_total``).  The task was not stored."""


class ParkUnclaimed(LockContended):
    """The final state (``FAILURE``) of a parked task that was published
    ``redislock_park_max_publishes`` times and no worker ever started it: no
    worker consumes the queue it is routed to, or none knows its task name.
    Its slot passed on; a copy still in the broker never runs."""


def raise_if_bounded(admission: Admission, name: str, what: str) -> None:
    """:class:`ParkFull` when ``admission`` met a bound (nothing was stored)."""
    if admission.verdict is Verdict.BOUNDED:
        raise ParkFull(
            f"{name!r}: {admission.count} tasks parked, the bound (redislock_park_max); {what}",
            name,
            "park",
        )
    if admission.verdict is Verdict.BOUNDED_TOTAL:
        raise ParkFull(
            f"{admission.count} tasks parked over all names, the bound "
            f"(redislock_park_max_total); {name!r}: {what}",
            name,
            "park",
        )


def announce_parked(
    task: Any, task_id: str, name: str, where: str, admission: Admission,
    config: ParkConfig | None = None,
) -> None:  # fmt: skip
    """``PARKED``, its log line and ``lock_parked`` (``where``: enqueue / arrive /
    pause / retry); for a task parked for its rate (or a pause) also
    ``lock_rate_limited``.  ``config``: the park settings of the call (a
    debounced call says so)."""
    count, wait = admission.count, admission.wait
    meta: dict[str, Any] = {"lock": name, "where": where}
    if where == "retry":  # a run's own retry, ahead of the park (parking/enqueue.py)
        meta["eligible_in"], wait = wait, 0.0
        log.info(
            "%s[%s] parked (retry): runs again in %.3f s, before the %d other task(s) "
            "parked for %r", task.name, task_id, meta["eligible_in"], count - 1, name,
        )  # fmt: skip
    elif config is not None and config.debounce > 0:
        bound = f", at the latest {config.debounce_max:g} s after the first" if (
            config.debounce_max > 0) else ""  # fmt: skip
        log.info(
            "%s[%s] parked (%s): %r debounced, runs %g s after the last call%s",
            task.name, task_id, where, name, config.debounce, bound,
        )  # fmt: skip
    elif wait > 0:
        meta["eligible_in"] = wait
        log.info(
            "%s[%s] parked (%s): %r waits for its rate, eligible in %.3f s, %d parked",
            task.name, task_id, where, name, wait, count,
        )  # fmt: skip
    else:
        log.info(
            "%s[%s] parked (%s): %r is full, %d parked", task.name, task_id, where, name, count
        )
    store_state(task.app, task_id, PARKED, meta)
    signals.lock_parked.send(
        sender=task, task_id=task_id, name=name, kind=task._redislock_kind, where=where,
        parked=count,
    )  # fmt: skip
    if wait > 0:
        signals.lock_rate_limited.send(
            sender=task, task_id=task_id, name=name, kind=task._redislock_kind,
            retry_after=wait, where=where,
        )  # fmt: skip


def announce_superseded(task: Any, replaced: Sequence[str], by: str, name: str, where: str) -> None:
    """``SUPERSEDED`` (with ``superseded_by``), its log line and ``lock_dropped``
    (reason ``"superseded"``) for each task a ``keep_latest`` call took out of
    the park (``where``: enqueue / arrive), or a run that stopped at its
    ``checkpoint()`` (``where``: run; ``by`` the newer call)."""
    for task_id in replaced:
        log.info(
            "%s[%s] superseded by %s (%s): %r keeps the latest call only",
            task.name, task_id, by, where, name,
        )  # fmt: skip
        store_state(task.app, task_id, SUPERSEDED,
                    {"lock": name, "superseded_by": by, "where": where})  # fmt: skip
        signals.lock_dropped.send(
            sender=task, task_id=task_id, name=name, kind=task._redislock_kind,
            reason="superseded", superseded_by=by,
        )  # fmt: skip


def store_state(app: Any, task_id: str, state: str, meta: dict[str, Any]) -> None:
    with contextlib.suppress(NotImplementedError, AttributeError):
        app.backend.store_result(task_id, meta, state)


def mark_revoked(app: Any, task_id: str, reason: str, request: Any = None) -> None:
    """REVOKED in the result backend; with the task's ``request`` a chord counts it."""
    with contextlib.suppress(NotImplementedError, AttributeError):
        app.backend.mark_as_revoked(task_id, reason, request=request)
