"""What a parked task shows: its states, its exceptions, and how they are recorded.

Every path of a parked task ends in a state of the result backend, a log
line and a signal (docs/park.md, "States"): ``PARKED`` while it waits,
``PROMOTED`` once re-published, then the states of a run, or ``REVOKED``
(expired, revoked, discarded), ``SUPERSEDED`` (``keep_latest``: a newer call
took its place) or ``FAILURE`` (:class:`ParkFull`, :class:`ParkUnclaimed`).
Each state written here is also sent as a Celery event (``events.py``).

**States only move forward.**  A state is decided in Redis (a park script)
and written to the result backend afterwards, by the process that decided
it; another process may decide a later state in between.  So every write
here for a task of a parked name holds that task's guard in the lock Redis
and re-checks, under it, that its decision still holds (``state_hold.lua``;
the park script that parks a task, or promotes it first in its reply, takes
the guard for that state in the same call, ``includes/hold_state_guard.lua``,
when it is free, and its caller writes that state right after):
``PARKED`` is written only while the task is still parked, ``PROMOTED`` only
while its promotion is in flight; final states always.  A late ``PARKED``
therefore never lands over ``SUPERSEDED``, ``PROMOTED``, ``REVOKED`` or a
run's state, on any result backend (no compare-and-set of the backend is
needed); but a ``revoke`` without the lock name writes ``REVOKED``
unguarded, and the park writes it again, guarded, when it drops the task.
``PROMOTED`` is written before the promoted message is published, so
Celery's own states of the run (``STARTED``, ``SUCCESS``...) always come
after it.  Where no state reaches anyone (no result backend and no
events: :data:`STATES_SEEN`) nothing is written, so no guard is taken
either, by a script or here.  The processes that share a lock Redis are
assumed to agree on that: a worker whose states reach nobody promotes
without waiting for another process's ``PARKED`` write, which a later
``STARTED`` could then precede.  :data:`STATES_SEEN` is found once per
process (and again at ``worker_init``): a result backend or
``task_send_sent_event`` set after a process's first park call is not seen
there.  Not guaranteed: a guard whose holder stalls longer than its TTL
(:data:`GUARD_TTL`) lets the next write in; a lock Redis that fails during a
write lets the write through unguarded (logged).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

from celery import current_task
from celery.backends.base import DisabledBackend
from celery.backends.rpc import RPCBackend
from celery.exceptions import Ignore

from .. import events, signals
from ..core.errors import LockContended
from ..core.park import Outcome, ParkConfig, Parking, Verdict
from ..settings import client_for

__all__ = [
    "PARKED",
    "PROMOTED",
    "STATES_SEEN",
    "SUPERSEDED",
    "ParkFull",
    "ParkUnclaimed",
    "StillPending",
    "announce_parked",
    "announce_superseded",
    "mark_failed",
    "mark_revoked",
    "raise_if_bounded",
    "store_state",
]

#: a parked task's name, or the name's :class:`Parking` (its client and prefix)
Where = str | Parking

#: seconds a state write's guard outlives a holder that stalled or died
GUARD_TTL = 5.0
#: seconds a write waits for another write of the same task before it goes
#: ahead unguarded: longer than GUARD_TTL, so a dead holder's guard lapses first
GUARD_WAIT = GUARD_TTL + 1.0

log = logging.getLogger("celery_redislock")


class _SeenBy(dict[Any, bool]):
    """app -> whether the task states this library writes for ``app`` reach
    anyone: a result backend (anything but Celery's ``DisabledBackend``) or
    task events (:func:`events.enabled`).  Filled on first use (a dict
    lookup after that: the park's hot paths ask on every call) and emptied
    at ``worker_init``, where a worker learns whether it sends events."""

    def __missing__(self, app: Any) -> bool:
        seen = events.enabled(app) or not isinstance(app.backend, DisabledBackend)
        self[app] = seen
        return seen

    def renew(self, app: Any) -> None:
        """At ``worker_init``: forget what was found before the worker knew
        whether it sends events, and find ``app``'s now (before its first task)."""
        self.clear()
        if app is not None:
            self.__missing__(app)


#: Where no state is seen, a park script takes no state guard for the state it
#: decides (``PARKED``, ``PROMOTED``): the guard only orders writes, and there
#: are none, so the caller would only spend a round trip giving it back.
STATES_SEEN = _SeenBy()

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


def raise_if_bounded(admission: Outcome, name: str, what: str) -> None:
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
    task: Any,
    task_id: str,
    name: str,
    where: str,
    admission: Outcome,
    config: ParkConfig | None = None,
    parking: Parking | None = None,
    waits_for: str | None = None,
) -> None:
    """``PARKED``, its log line and ``lock_parked`` (``where``: enqueue / arrive /
    pause / retry / limit); for a task parked for its rate (or a pause) also
    ``lock_rate_limited``.  ``config``: the park settings of the call (a
    debounced call says so); ``parking``: the name's, if the caller has it;
    ``waits_for``: the listed limit a run sent back by it waits for (its
    ``PARKED`` meta says so too)."""
    count, wait = admission.count, admission.wait
    meta: dict[str, Any] = {"lock": name, "where": where}
    if waits_for is not None:
        meta["waits_for"] = waits_for
        log.info(
            "%s[%s] parked (limit): listed limit %r is full; back at the head of %r, %d parked",
            task.name,
            task_id,
            waits_for,
            name,
            count,
        )
    elif where == "retry":  # a run's own retry, ahead of the park (parking/enqueue.py)
        meta["eligible_in"], wait = wait, 0.0
        log.info(
            "%s[%s] parked (retry): runs again in %.3f s, before the %d other task(s) "
            "parked for %r",
            task.name,
            task_id,
            meta["eligible_in"],
            count - 1,
            name,
        )
    elif config is not None and config.debounce > 0:
        bound = (
            f", at the latest {config.debounce_max:g} s after the first"
            if (config.debounce_max > 0)
            else ""
        )
        log.info(
            "%s[%s] parked (%s): %r debounced, runs %g s after the last call%s",
            task.name,
            task_id,
            where,
            name,
            config.debounce,
            bound,
        )
    elif wait > 0:
        meta["eligible_in"] = wait
        log.info(
            "%s[%s] parked (%s): %r waits for its rate, eligible in %.3f s, %d parked",
            task.name,
            task_id,
            where,
            name,
            wait,
            count,
        )
    else:
        log.info(
            "%s[%s] parked (%s): %r is full, %d parked", task.name, task_id, where, name, count
        )
    store_state(
        task.app,
        task_id,
        PARKED,
        meta,
        lock=parking or name,
        task_name=task.name,
        needs="parked",
        guard=admission.guard,
    )
    signals.lock_parked.send(
        sender=task,
        task_id=task_id,
        name=name,
        kind=task._redislock_kind,
        where=where,
        parked=count,
        waits_for=waits_for,
    )
    if wait > 0:
        signals.lock_rate_limited.send(
            sender=task,
            task_id=task_id,
            name=name,
            kind=task._redislock_kind,
            retry_after=wait,
            where=where,
        )


def announce_superseded(task: Any, replaced: Sequence[str], by: str, name: str, where: str) -> None:
    """``SUPERSEDED`` (with ``superseded_by``), its log line and ``lock_dropped``
    (reason ``"superseded"``) for each task a ``keep_latest`` call took out of
    the park (``where``: enqueue / arrive), a run that a listed limit sent
    back while a newer call waited in the park, or an older run sent back
    so that this one replaced (``where``: limit), or a run that stopped at
    its ``checkpoint()`` (``where``: run; ``by`` the newer call)."""
    for task_id in replaced:
        log.info(
            "%s[%s] superseded by %s (%s): %r keeps the latest call only",
            task.name,
            task_id,
            by,
            where,
            name,
        )
        meta = {"lock": name, "superseded_by": by, "where": where}
        store_state(task.app, task_id, SUPERSEDED, meta, lock=name, task_name=task.name)
        signals.lock_dropped.send(
            sender=task,
            task_id=task_id,
            name=name,
            kind=task._redislock_kind,
            reason="superseded",
            superseded_by=by,
        )


def store_state(
    app: Any,
    task_id: str,
    state: str,
    meta: dict[str, Any],
    lock: Where = "",
    task_name: str = "",
    needs: str = "",
    guard: str = "",
) -> bool:
    """Write ``state`` (with ``meta``) for ``task_id`` to the result backend
    and send its event, holding the task's guard when ``lock`` (the name it
    is parked under, or that name's :class:`Parking` when the caller has one:
    its client and prefix) is given; ``needs`` the decision that must still
    hold (``"parked"``, ``"inflight"``, ``""``).  ``guard``: the holder of
    the guard when the park script that decided the state took it (then it
    is not asked for again).  False when it no longer held, and nothing was
    written."""
    with _guarded(app, lock, task_id, needs, guard) as holds:
        if not holds:
            return False
        # What a backend with result_extended stores beside the state (task
        # name, args, worker): the running request when the state is its own
        # task's (parked at arrival, its retry), else the task's name alone (a
        # call not running), so a row keeps its name, and a running task's row
        # the args and worker its STARTED stored.
        request = getattr(current_task, "request", None)
        if request is None or getattr(request, "id", None) != task_id:
            request = SimpleNamespace(task=task_name or None)
        _write(app, task_id, state, app.backend.store_result, task_id, meta, state, request=request)
        events.send(app, f"task-{state.lower()}", task_id, name=task_name, **_fields(meta))
        return True


def mark_revoked(
    app: Any,
    task_id: str,
    reason: str,
    request: Any = None,
    lock: Where = "",
    task_name: str = "",
    guard: str = "",
) -> None:
    """REVOKED in the result backend; with the task's ``request`` a chord counts
    it.  Sent as ``task-revoked`` with the task's name (``expired`` set when
    ``reason`` is ``"expired"``).  With ``lock`` (the task was taken out of
    that name's park: it never ran) under the task's guard (``guard``: its
    holder, when the caller holds it already)."""
    with _guarded(app, lock, task_id, "", guard):
        _write(
            app, task_id, "REVOKED", app.backend.mark_as_revoked, task_id, reason, request=request
        )
        # state: Celery's event state machine ranks its custom states (PARKED)
        # above REVOKED and would keep a revoked parked task PARKED; an event's
        # fields are applied to the task as they are, so this one says it.
        # Only for a task known never to have run (taken out of a park).
        never_ran = {"state": "REVOKED"} if lock else {}
        events.send(
            app,
            "task-revoked",
            task_id,
            name=task_name or getattr(request, "task", None),
            terminated=False,
            signum=None,
            expired=reason == "expired",
            reason=reason,
            **never_ran,
        )


def mark_failed(
    app: Any,
    task_id: str,
    exc: BaseException,
    request: Any = None,
    lock: Where = "",
    task_name: str = "",
) -> None:
    """FAILURE with ``exc`` in the result backend (errbacks and a chord it
    belongs to are told), sent as ``task-failed`` with the task's name."""
    with _guarded(app, lock, task_id, ""):
        _write(app, task_id, "FAILURE", app.backend.mark_as_failure, task_id, exc, request=request)
        events.send(app, "task-failed", task_id, name=task_name, exception=repr(exc))


def _write(
    app: Any, task_id: str, state: str, write: Callable[..., Any], *args: Any, **kwargs: Any
) -> None:
    """``write(*args, **kwargs)``, the result-backend write of ``state`` for ``task_id``.

    A backend that stores nothing (Celery's ``DisabledBackend``) is skipped
    quietly.  A write that fails is one WARNING and nothing more: the
    decision behind the state is already made in Redis (the task is parked,
    promoted, dropped...), so an exception here would only tell a caller
    that a parked call failed, and a caller that sent it again would run it
    twice.  Celery's ``rpc://`` backend sends a state to the reply queue of
    the *current* task's caller: a state of another task (one this process
    parks, promotes or drops) would reach the wrong caller, or none, so it
    is not written there; its events still carry it (docs/park.md)."""
    rpc = isinstance(app.backend, RPCBackend)
    if rpc and getattr(getattr(current_task, "request", None), "id", None) != task_id:
        return
    for last_try in (False, True):
        try:
            write(*args, **kwargs)
        except (NotImplementedError, AttributeError):
            return  # no result backend configured
        except Exception as exc:  # see the docstring
            if last_try or not _closed_broken_django_connections(exc):
                log.warning("%s of %s not written to the result backend: %r", state, task_id, exc)
                return
        else:
            return


def _closed_broken_django_connections(error: BaseException) -> bool:
    """Whether ``error`` came from a Django database connection this thread
    has now closed because it is broken (the next query opens a new one), so
    the write may be made once more.

    Django's connections are per thread, and only its request cycle and
    Celery's task hooks (``close_old_connections``) replace a broken one:
    with the ``django-db`` result backend, a thread of the worker's main
    process (the park sweeper, a dead child's release) would keep a
    connection the database dropped (a restart, a failover, an idle
    timeout) and lose every later state it writes.  Only a connection that failed and no
    longer answers is closed, never one in a transaction (an ``atomic``
    block, or autocommit turned off): closing it would lose the caller's
    work.  Any other error is not retried (a write such as
    ``mark_as_failure`` also tells chords and errbacks)."""
    db = sys.modules.get("django.db")
    if db is None or not isinstance(error, db.Error):
        return False
    closed = False
    try:
        for connection in db.connections.all():
            if (
                connection.connection is not None
                and connection.errors_occurred
                and not connection.in_atomic_block
                and connection.get_autocommit()
                and not connection.is_usable()
            ):
                connection.close()
                closed = True
    except Exception:  # Django not configured, or no database
        return False
    return closed


def _fields(meta: dict[str, Any]) -> dict[str, Any]:
    """The parts of a state's meta an event carries (plain values only)."""
    return {k: v for k, v in meta.items() if isinstance(v, (str, int, float, bool, type(None)))}


@contextlib.contextmanager
def _guarded(app: Any, lock: Where, task_id: str, needs: str, guard: str = "") -> Iterator[bool]:
    """Hold ``task_id``'s state guard for the block (see the module docstring);
    yields whether the write may go ahead.  ``guard``: the holder of the
    guard when a park script took it for this write (its decision holds:
    the script made it), so no round trip asks for it.  Whatever goes wrong
    with the guard itself (the lock Redis down, a Cluster unreachable,
    settings that name no Redis), the write goes ahead unguarded, with a
    WARNING: a state is never lost for want of its guard."""
    if not lock or not (guard or STATES_SEEN[app]):
        yield True
        return
    holder = guard or uuid.uuid4().hex
    try:
        if isinstance(lock, Parking):
            parking = lock
        else:
            client, settings = client_for(app)
            parking = Parking(client, settings.prefix, lock)
        deadline = time.monotonic() + GUARD_WAIT
        held = 1 if guard else parking.hold_state(task_id, holder, needs, GUARD_TTL)
        while held == 0:
            if time.monotonic() > deadline:
                log.warning("state of %s written without its guard: held too long", task_id)
                break
            time.sleep(0.002)  # another write of this task id, about one backend write long
            held = parking.hold_state(task_id, holder, needs, GUARD_TTL)
    except Exception as exc:  # see the docstring
        log.warning("state of %s written without its guard (%r)", task_id, exc)
        yield True
        return
    if held == -1:
        yield False
        return
    try:
        yield True
    finally:
        if held == 1:
            with contextlib.suppress(Exception):
                parking.free_state(task_id, holder)
