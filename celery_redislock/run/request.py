"""The worker-side request class of guarded tasks: clean-up in the main process.

A pool child that is killed (SIGKILL, OOM killer, hard time limit, revoke
with ``terminate=True``) cannot release its lease.  The worker's *main*
process finds out in two ways, whichever comes first:

* :class:`ChildWatcher`: from ``on_accepted`` on, a thread polls
  ``/proc/<pid>`` of every running guarded task's child every 0.1 s (Celery
  itself reports a lost child only after ``worker_lost_wait``, seconds later);
* the request's own hooks: ``on_failure`` with ``WorkerLostError`` /
  ``Terminated`` / ``TimeLimitExceeded``, ``on_timeout`` and ``terminate``,
  which fire whatever the ``acks_late`` / ``reject_on_worker_lost`` settings
  (these decide whether ``task_failure`` is sent at all).

It then recomputes the lock name from the request's arguments and releases
the owners whose id starts with that task id, this host and the child's pid
(plus the task's enqueue marker), from a short-lived thread and only once
that child process has exited: a child that survives the signal
(``revoke(terminate=True, signal="SIGUSR1")``) or is still unwinding keeps
its lease, renews it and releases it itself.  Measured: the lock is free
about 0.1 s after a SIGKILL.

Guaranteed: only that child's holdings for that task id are released, and
not while the child is alive.  Not guaranteed: clean-up when the main
process itself dies (then the TTL frees everything), or when Redis is
unreachable at that moment (logged; the TTL frees it).

Tasks that need their own ``Request`` class should subclass :class:`LockRequest`.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from billiard.einfo import ExceptionInfo, ExceptionWithTraceback
from billiard.exceptions import Terminated, TimeLimitExceeded, WorkerLostError
from celery.exceptions import Ignore
from celery.worker.request import Request

from ..core.heartbeat import is_cluster
from ..core.keys import LeaseKeys
from ..core.liveness import process_gone
from ..core.owners import execution_prefix
from ..core.park import Parking
from ..core.scripts import REFRESH_PREFIX
from ..enqueue.options import HEADER_DEDUPE, HEADER_PARK_TOKEN, HEADER_TTL
from ..parking.message import REQUEST_CONTENT_TYPE, copy_token
from ..settings import client_for
from .listed_leases import renewal_names

__all__ = ["WATCHER", "ChildWatcher", "LockRequest"]

log = logging.getLogger("celery_redislock")

_CHILD_GONE = (WorkerLostError, Terminated, TimeLimitExceeded, SystemExit, KeyboardInterrupt)


def _ignored() -> ExceptionInfo:
    """An ``ExceptionInfo`` of Celery's ``Ignore``: what ``Request.on_failure``
    acknowledges without a state or a signal."""
    try:
        raise Ignore()
    except Ignore:
        return ExceptionInfo()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeLimitExceeded):
        return "time limit"
    if isinstance(exc, Terminated):
        return "terminated"
    return "worker lost"


class ChildWatcher:
    """Watches, from the worker's main process, the children running guarded tasks.

    Two jobs, one thread (``redislock-child-watcher``) polling every ``INTERVAL``:

    * **clean-up**: Celery reports a lost child only after
      ``worker_lost_wait`` (seconds); this thread polls ``/proc/<pid>`` of each
      running guarded task instead and starts the clean-up at once;
    * **renewal**: every ``ttl / 3`` it renews the leases that each live
      child holds for its running guarded task, with one
      ``refresh_prefix.lua`` call per lock name (all of that name's watched
      tasks at once, matched by owner prefix: task id, host, child pid), from
      a separate I/O thread so that a hanging Redis does not delay the
      clean-up.  The main process is not blocked by a child's GIL, so a body
      stuck in one long C call (``sum(range(n))``, a big ``json.dumps``, a
      regex) keeps its lease.  The child's own heartbeat renews too.

    Entries are dropped, and renewal stops, as soon as the task is no longer
    active in this worker (it finished, whatever way) or its child exited.
    Guaranteed: a lease is renewed only while unexpired by Redis time (never
    revived) and only while its child is alive and its task active here, give
    or take one renewal already under way (which extends it by one ttl at
    most).  Not guaranteed: renewal while the main process itself is stopped
    or Redis unreachable (the lease then expires by its ttl, as always), nor
    exclusion against a child that is alive but hung: its lease is renewed
    until the task's time limit kills it, as the child's own heartbeat would.
    A clean-up for a task that had already finished finds nothing to release
    (its owners are gone), so it is safe.
    """

    INTERVAL = 0.1
    CHILDREN_KEPT = 10000
    MIN_INTERVAL = 0.01

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[int, _Watched] = {}
        self._thread: threading.Thread | None = None
        self._renewer: _Renewer | None = None
        #: pids of the pool children it has watched lately (the newest
        #: CHILDREN_KEPT, in insertion order): their clean-up is its job (with
        #: a lock_released signal), not the sweeper's (release_dead_holders)
        self.children: dict[int, None] = {}

    def watch(self, request: LockRequest, *, renew: bool = True) -> None:
        watched = _Watched(request, renew)
        with self._lock:
            self._requests[id(request)] = watched
            self.children.pop(request.worker_pid, None)
            self.children[request.worker_pid] = None
            if len(self.children) > self.CHILDREN_KEPT:  # bounded: children come and go
                del self.children[next(iter(self.children))]
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="redislock-child-watcher", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        from celery.worker import state

        pause = self.INTERVAL
        while True:
            time.sleep(pause)
            with self._lock:
                if not self._requests:
                    self._thread = None  # idle: the next watch() starts a new one
                    return
                entries = list(self._requests.items())
            gone: dict[int, bool] = {}  # one /proc read per child, not per task
            due: list[_Renewal] = []
            unbuilt: list[_Watched] = []  # first renewal due, names not built (see _Watched)
            now = time.monotonic()
            pause = self.INTERVAL
            for key, watched in entries:
                request = watched.request
                pid = request.worker_pid
                if pid not in gone:
                    gone[pid] = pid != os.getpid() and process_gone(pid)
                active = request in state.active_requests
                if gone[pid] or not active:
                    with self._lock:
                        self._requests.pop(key, None)
                    if gone[pid]:
                        request._redislock_cleanup("worker lost")
                    continue
                renewals = watched.renewals
                if renewals is None:
                    if now >= watched.first_renewal_at:
                        unbuilt.append(watched)
                    at = watched.first_renewal_at
                    pause = min(pause, max(self.MIN_INTERVAL, at - now))
                    continue
                for renewal in renewals:
                    if now >= renewal.next_at:
                        due.append(renewal)
                    pause = min(pause, max(self.MIN_INTERVAL, renewal.next_at - now))
            if due or unbuilt:
                if self._renewer is None:
                    self._renewer = _Renewer(self)
                self._renewer.submit(due, unbuilt)


class _Renewal:
    """What the main process needs to renew one running task's leases."""

    def __init__(self, task: Any, app: Any, name: str, prefix: str, ttl: float) -> None:
        self.task = task
        self.app = app
        self.name = name
        self.prefix = prefix
        self.interval = ttl / 3
        self.next_at = time.monotonic() + self.interval


class _Watched:
    """A running guarded task and its renewals.

    The lock names are built only when the first renewal falls due (a third
    of the TTL after the task was accepted), on the renewer's I/O thread:
    most tasks end before, building a name (binding the call's arguments to
    the task's signature) was most of what watching cost the main process
    per task, and a ``lock_key`` callable (user code) that blocks there
    holds up the renewals, not the watch that cleans up after lost children
    (the clean-up of a lost child builds its names again, on the watch's
    thread).
    """

    def __init__(self, request: LockRequest, renew: bool) -> None:
        self.request = request
        #: None until first_renewal_at, then one per lease to renew
        self.renewals: list[_Renewal] | None = None if renew else []
        self.ttl = _ttl_of(request) if renew else math.inf
        self.first_renewal_at = time.monotonic() + self.ttl / 3


def _ttl_of(request: LockRequest) -> float:
    """The TTL of ``request``'s leases: the call's, the task's, else the app's default."""
    task = request.task
    try:
        ttl = request.request_dict.get(HEADER_TTL) or task._redislock_ttl_option()
        if ttl is None:
            ttl = client_for(task.app)[1].default_ttl
        return float(ttl)
    except Exception as exc:  # checked at the call and in the child too: nothing to renew
        log.debug("%s[%s]: no renewal from the main process: %r", task.name, request.id, exc)
        return math.inf


def _renewals_of(request: LockRequest, ttl: float) -> list[_Renewal]:
    """How to renew ``request``'s leases of ``ttl`` (each next due an interval
    from now): its own name's and its listed limits' (``limits=``); none when
    its name cannot be built."""
    task = request.task
    try:
        name = task.redislock_name(request.args, request.kwargs)
        names = [name, *renewal_names(task, request.args, request.kwargs)]
    except Exception as exc:  # bad arguments: the body never acquires either
        log.debug("%s[%s]: no renewal from the main process: %r", task.name, request.id, exc)
        return []
    prefix = execution_prefix(request.id, request.worker_pid)
    return [_Renewal(task, task.app, n, prefix, ttl) for n in names]


class _Renewer:
    """Runs the due renewals on one I/O thread, one batch at a time.

    A batch still under way (Redis slow) makes the watcher skip, not queue:
    the entries stay due and go with the next batch.
    """

    #: seconds between two WARNINGs about one name's failing renewals (the
    #: watcher retries every INTERVAL: one line each time would flood the log)
    WARN_EVERY = 30.0

    def __init__(self, watcher: ChildWatcher) -> None:
        self._watcher = watcher
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="redislock-child-renewer")
        self._future: Future[None] | None = None
        self._warned_at: dict[str, float] = {}  # name -> when its failure was last a WARNING

    def submit(self, due: list[_Renewal], unbuilt: list[_Watched]) -> None:
        """Renew ``due``, and ``unbuilt`` (names not built yet) for the first time."""
        if self._future is not None and not self._future.done():
            return
        now = time.monotonic()
        for renewal in due:
            renewal.next_at = now + renewal.interval
        self._future = self._pool.submit(self._renew, due, unbuilt)

    def _renew(self, due: list[_Renewal], unbuilt: list[_Watched]) -> None:
        for watched in unbuilt:
            if watched.renewals is None:  # else built by an earlier batch, and renewed then
                watched.renewals = _renewals_of(watched.request, watched.ttl)
                due = [*due, *watched.renewals]
        groups: dict[tuple[int, str], list[_Renewal]] = {}
        for renewal in due:
            groups.setdefault((id(renewal.app), renewal.name), []).append(renewal)
        for group in groups.values():
            first = group[0]
            try:
                client, settings = client_for(first.app)
                keys = LeaseKeys(settings.prefix, first.name, not is_cluster(client))
                renewed, shortest_ms = REFRESH_PREFIX(
                    client, keys.refresh_keys(), sorted({r.prefix for r in group})
                )
            except Exception as exc:
                now = time.monotonic()
                self._warned_at = {  # bounded: only the names warned about lately
                    n: t for n, t in self._warned_at.items() if now - t < self.WARN_EVERY
                }
                quiet = now - self._warned_at.get(first.name, -math.inf) < self.WARN_EVERY
                if not quiet:
                    self._warned_at[first.name] = now
                (log.debug if quiet else log.warning)(
                    "main process: could not renew the leases on %r of its children "
                    "(retrying soon; the children renew too; said once per %g s): %r",
                    first.name,
                    self.WARN_EVERY,
                    exc,
                )
                retry_at = now + self._watcher.INTERVAL
                for renewal in group:
                    renewal.next_at = min(renewal.next_at, retry_at)
                continue
            self._warned_at.pop(first.name, None)  # the next failure is news again
            if int(renewed):
                interval = int(shortest_ms) / 3000
                for renewal in group:
                    renewal.interval = min(renewal.interval, interval)


WATCHER = ChildWatcher()
os.register_at_fork(after_in_child=WATCHER._reset)


class LockRequest(Request):  # type: ignore[misc]
    """``celery.worker.request.Request`` plus release of a dead child's leases."""

    #: the main process's watcher of children (replaceable, e.g. in a subclass)
    watcher: ChildWatcher = WATCHER

    def __init__(self, message: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(message, *args, **kwargs)
        # What the pool child re-serializes a parked message in.  Celery's
        # Context sees it as a custom header too: GuardedTask.__call__ takes
        # it out of request.headers, so retries and requeues do not carry it.
        if self._content_type:
            self._request_dict[REQUEST_CONTENT_TYPE] = self._content_type
        else:
            self._request_dict.pop(REQUEST_CONTENT_TYPE, None)

    def on_accepted(self, pid: int, time_accepted: float) -> None:
        super().on_accepted(pid, time_accepted)
        if pid and pid != os.getpid() and hasattr(self.task, "redislock_cleanup"):
            self.watcher.watch(self)

    def send_event(self, type: str, **fields: Any) -> None:
        """Celery's ``send_event``; its ``task-revoked`` (revoked before the
        run, expired, or terminated) also carries ``state: "REVOKED"``.
        Celery's state machine (``celery.events.state``, what Flower and the
        event exporters build on) ranks custom states such as ``PROMOTED``
        above ``REVOKED``, so without the field a promoted task revoked by
        Celery's own ``revoke`` showed ``PROMOTED`` there for ever."""
        if type == "task-revoked":
            fields.setdefault("state", "REVOKED")
        super().send_event(type, **fields)

    def on_timeout(self, soft: bool, timeout: float) -> None:
        super().on_timeout(soft, timeout)
        if not soft:
            self._redislock_cleanup("time limit")

    def on_failure(
        self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False
    ) -> Any:
        exc = exc_info.exception
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        if isinstance(exc, (WorkerLostError, TimeLimitExceeded)) and self._redislock_in_park():
            # The run had parked its task (at arrival, or back at the head with
            # redislock_pause) before its process died: the park has the task,
            # which runs from there, so this is not its failure; or a newer
            # call took its place there (keep_latest, refused by a listed
            # limit: SUPERSEDED).  Acknowledged as Celery does an Ignore (no
            # FAILURE, no task_failure, no requeue): its state stays.
            log.info(
                "%s[%s]: its process died after the task was parked; it runs from its "
                "park, or a newer call took its place there",
                self.task.name,
                self.id,
            )
            exc_info = _ignored()
        try:
            return super().on_failure(
                exc_info, send_failed_event=send_failed_event, return_ok=return_ok
            )
        finally:
            if isinstance(exc, _CHILD_GONE):
                self._redislock_cleanup(_reason(exc))

    def revoked(self) -> bool:
        """Celery's check.  A task revoked (or expired) before it ran drops its
        enqueue marker, and a promoted parked task gives its reservation back
        (the slot passes on at once, and a revoke record keeps it from ever
        being promoted again, also once workers forget the revoke)."""
        revoked = bool(super().revoked())
        if not revoked or self._redislock_discarded or self.time_start:
            return revoked
        self._redislock_discarded = True
        clear = getattr(self.task, "redislock_clear_marker", None)
        if clear is not None and self.request_dict.get(HEADER_DEDUPE):
            threading.Thread(
                target=clear,
                args=(self.id, self.args, self.kwargs),
                name="redislock-unmark",
                daemon=True,
            ).start()
        token = self.request_dict.get(HEADER_PARK_TOKEN)
        if token is not None and hasattr(self.task, "redislock_name"):
            from ..parking.promotion import discarded_by_worker

            threading.Thread(
                target=discarded_by_worker,
                args=(self.task, self.id, str(token), self.args, self.kwargs),
                name="redislock-unpark",
                daemon=True,
            ).start()
        return revoked

    _redislock_discarded = False

    def _redislock_in_park(self) -> bool:
        """Whether this task id waits in its name's park (parked or promoted),
        or this copy of it was given up there: its promotion token, or for a
        copy without one (``send_task``, a countdown, a retry) the mark of
        the process that ran it (:func:`~celery_redislock.parking.message.copy_token`),
        is stale (the run went back to its park, which promoted it again or
        let a newer call take its place)."""
        name_of = getattr(self.task, "redislock_name", None)
        if name_of is None:
            return False
        try:
            client, settings = client_for(self.task.app)
            name = name_of(self.args, self.kwargs)
            token = copy_token(self.request_dict.get(HEADER_PARK_TOKEN), self.worker_pid or 0)
            where, fate = Parking(client, settings.prefix, name).where(self.id, token)
            return bool(where) or fate == "stale"
        except Exception as exc:  # Celery's own handling then: FAILURE, as without us
            log.error("%s[%s]: could not read its park (%r)", self.task.name, self.id, exc)
            return False

    def terminate(self, pool: Any, signal: Any = None) -> None:
        super().terminate(pool, signal)
        if self.time_start:
            self._redislock_cleanup("terminated")

    def _redislock_cleanup(self, reason: str) -> None:
        cleanup = getattr(self.task, "redislock_cleanup", None)
        pid = self.worker_pid
        if cleanup is None or not pid or pid == os.getpid() or self._redislock_cleaning:
            return  # not a guarded task, or no separate child (solo/threads pools)
        self._redislock_cleaning = True
        args = (self.id, pid, self.args, self.kwargs, dict(self.request_dict), reason)
        threading.Thread(
            target=_release_when_gone,
            args=(cleanup, self.name, args, self.task._redislock_ttl_option() or 60.0),
            name=f"redislock-cleanup-{pid}",
            daemon=True,
        ).start()

    _redislock_cleaning = False


def _release_when_gone(cleanup: Any, task_name: str, args: tuple[Any, ...], ttl: float) -> None:
    """Release the leases of a task once its child process has exited.

    Not before: a child that survives the signal (or is still unwinding)
    keeps renewing and releases by itself.  Gives up after ``2 * ttl``, when
    a surviving child has long released or renewed its lease.
    """
    task_id, pid, reason = args[0], args[1], args[5]
    deadline = time.monotonic() + 2 * ttl
    while not process_gone(pid):
        if time.monotonic() > deadline:
            log.info("%s[%s]: process %d alive; it releases by itself", task_name, task_id, pid)
            return
        time.sleep(0.02)
    try:
        cleanup(*args)
    except Exception:
        log.exception(
            "could not release the lease of %s[%s] after its process %s ended (%s); "
            "it expires within its ttl",
            task_name,
            task_id,
            pid,
            reason,
        )
