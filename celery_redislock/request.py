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
import os
import threading
import time
from typing import Any

from billiard.einfo import ExceptionWithTraceback
from billiard.exceptions import Terminated, TimeLimitExceeded, WorkerLostError
from celery.worker.request import Request

from .task import HEADER_DEDUPE

__all__ = ["WATCHER", "ChildWatcher", "LockRequest"]

log = logging.getLogger("celery_redislock")

_CHILD_GONE = (WorkerLostError, Terminated, TimeLimitExceeded, SystemExit, KeyboardInterrupt)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeLimitExceeded):
        return "time limit"
    if isinstance(exc, Terminated):
        return "terminated"
    return "worker lost"


class LockRequest(Request):  # type: ignore[misc]
    """``celery.worker.request.Request`` plus release of a dead child's leases."""

    def on_accepted(self, pid: int, time_accepted: float) -> None:
        super().on_accepted(pid, time_accepted)
        if pid and pid != os.getpid() and hasattr(self.task, "redislock_cleanup"):
            WATCHER.watch(self)

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
        try:
            return super().on_failure(
                exc_info, send_failed_event=send_failed_event, return_ok=return_ok
            )
        finally:
            if isinstance(exc, _CHILD_GONE):
                self._redislock_cleanup(_reason(exc))

    def revoked(self) -> bool:
        """Celery's check; a task revoked (or expired) before it ran drops its enqueue marker."""
        revoked = bool(super().revoked())
        if revoked and self.request_dict.get(HEADER_DEDUPE) and not self._redislock_unmarked:
            self._redislock_unmarked = True
            clear = getattr(self.task, "redislock_clear_marker", None)
            if clear is not None:
                threading.Thread(
                    target=clear,
                    args=(self.id, self.args, self.kwargs),
                    name="redislock-unmark",
                    daemon=True,
                ).start()
        return revoked

    _redislock_unmarked = False

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


class ChildWatcher:
    """Notices, within ``INTERVAL``, that the child running a guarded task died.

    Celery reports a lost child only after ``worker_lost_wait`` (seconds); this
    thread of the main process polls ``/proc/<pid>`` of each running guarded
    task instead and starts the clean-up at once.  Entries are dropped when
    the task is no longer active.  A clean-up for a task that had already
    finished finds nothing to release (its owners are gone), so it is safe.
    """

    INTERVAL = 0.1

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[int, LockRequest] = {}
        self._thread: threading.Thread | None = None

    def watch(self, request: LockRequest) -> None:
        with self._lock:
            self._requests[id(request)] = request
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="redislock-child-watcher", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        from celery.worker import state

        while True:
            time.sleep(self.INTERVAL)
            with self._lock:
                if not self._requests:
                    self._thread = None  # idle: the next watch() starts a new one
                    return
                entries = list(self._requests.items())
            gone: dict[int, bool] = {}  # one /proc read per child, not per task
            for key, request in entries:
                pid = request.worker_pid
                if pid not in gone:
                    gone[pid] = _process_gone(pid)
                if gone[pid] or request not in state.active_requests:
                    with self._lock:
                        self._requests.pop(key, None)
                if gone[pid]:
                    request._redislock_cleanup("worker lost")


WATCHER = ChildWatcher()
os.register_at_fork(after_in_child=WATCHER._reset)


def _process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
        return state in (b"Z", b"X")
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _release_when_gone(cleanup: Any, task_name: str, args: tuple[Any, ...], ttl: float) -> None:
    """Release the leases of a task once its child process has exited.

    Not before: a child that survives the signal (or is still unwinding)
    keeps renewing and releases by itself.  Gives up after ``2 * ttl``, when
    a surviving child has long released or renewed its lease.
    """
    task_id, pid, reason = args[0], args[1], args[5]
    deadline = time.monotonic() + 2 * ttl
    while not _process_gone(pid):
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
