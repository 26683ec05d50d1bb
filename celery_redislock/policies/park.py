"""``park``: a contended task waits in Redis, in its name's FIFO park list.

No worker process blocks, no message bounces through the broker: the task
is stored at enqueue (or on arrival, when it came another way) and published
again when a slot frees.  The machinery (scripts, message capture, promotion,
sweeper, revoke) is :mod:`celery_redislock.parking`; docs/park.md has the
state machine and the guarantees.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from .. import parking
from ..core.leaseset import LeaseSet
from .base import Attempt, Policy, fail

__all__ = ["Park"]


class Park(Policy):
    """Parks a task whose name is full; a release promotes the next one.

    Under eager execution there is no broker to park for, so it waits like
    ``wait``.  A call with a ``countdown`` / ``eta`` is published as it is
    and decided when it arrives.
    """

    name = "park"

    def acquire(self, attempt: Attempt) -> bool:
        if attempt.request.is_eager:
            return attempt.lease_set.acquire(blocking=True, timeout=attempt.wait_timeout)
        parking.admit(
            attempt.task, attempt.request, attempt.args, attempt.kwargs, attempt.lease_set
        )  # holds the lease, or raises Ignore (parked, or a stale copy)
        return True

    def contended(self, attempt: Attempt) -> NoReturn:
        fail(
            attempt,
            self.name,
            f"{attempt.kind} {attempt.name!r} still held after waiting "
            f"{attempt.wait_timeout} s (policy park, eager)",
        )

    def publish(
        self, task: Any, name: str, task_id: str, args: Any, kwargs: Any,
        call: Mapping[str, Any], send: Callable[[], Any],
    ) -> Any:  # fmt: skip
        if task.app.conf.task_always_eager or _delayed(call):
            return send()
        limit = task.redislock_limit(args, kwargs)
        return parking.apply_async(task, name, task_id, limit, send)

    def releaser(self, task: Any, lease_set: LeaseSet, limit: int) -> Callable[[str], bool]:
        return parking.releaser(task, lease_set, limit)

    def after_release(self, task: Any, name: str, limit: int) -> None:
        parking.after_release(task, name, limit)


def _delayed(call: Mapping[str, Any]) -> bool:
    countdown, eta = call.get("countdown"), call.get("eta")
    if isinstance(countdown, (int, float)) and countdown > 0:
        return True
    return isinstance(eta, (datetime.datetime, str))
