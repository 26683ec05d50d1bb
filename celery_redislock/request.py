"""The worker-side request class of guarded tasks: clean-up in the main process.

A pool child that is killed (SIGKILL, OOM killer, hard time limit, revoke
with ``terminate=True``) cannot release its lease.  The worker's *main*
process learns of each of these through the task's request object
(``on_failure`` with :class:`~celery.exceptions.WorkerLostError`,
``on_timeout``, ``terminate``), whatever the ``acks_late`` /
``reject_on_worker_lost`` settings (which decide whether ``task_failure`` is
sent at all).  It recomputes the lock name from the request's arguments and
releases the owners whose id starts with that task id, this host and the dead
child's pid, so the lease is free within about a second instead of a TTL.
It does so from a short-lived thread, and only once that child process has
exited: a child that survives the signal (``revoke(terminate=True,
signal="SIGUSR1")``) or is still unwinding keeps its lease, renews it and
releases it itself.

Guaranteed: only that child's holdings for that task id are released, and
not while the child is alive.  Not
guaranteed: clean-up when the main process itself dies (then the TTL frees
everything), or when Redis is unreachable at that moment (logged; TTL).

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

__all__ = ["LockRequest"]

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
