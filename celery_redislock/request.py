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

Guaranteed: only that child's holdings for that task id are released.  Not
guaranteed: clean-up when the main process itself dies (then the TTL frees
everything), or when Redis is unreachable at that moment (logged; TTL).

Tasks that need their own ``Request`` class should subclass :class:`LockRequest`.
"""

from __future__ import annotations

import logging
from typing import Any

from billiard.einfo import ExceptionWithTraceback
from billiard.exceptions import Terminated, TimeLimitExceeded, WorkerLostError
from celery.worker.request import Request

__all__ = ["LockRequest"]

log = logging.getLogger("celery_redislock")

_CHILD_GONE = (WorkerLostError, Terminated, TimeLimitExceeded, SystemExit, KeyboardInterrupt)


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
                self._redislock_cleanup(
                    "worker lost" if isinstance(exc, WorkerLostError) else type(exc).__name__
                )

    def terminate(self, pool: Any, signal: Any = None) -> None:
        super().terminate(pool, signal)
        if self.time_start:
            self._redislock_cleanup("terminated")

    def _redislock_cleanup(self, reason: str) -> None:
        task = self.task
        cleanup = getattr(task, "redislock_cleanup", None)
        pid = self.worker_pid
        if cleanup is None or not pid:
            return
        try:
            cleanup(self.id, pid, self.args, self.kwargs, self.request_dict, reason)
        except Exception:
            log.exception(
                "could not release the lease of %s[%s] after its process %s ended (%s); "
                "it expires within its ttl",
                self.name,
                self.id,
                pid,
                reason,
            )
