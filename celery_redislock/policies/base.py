"""What every contention policy shares: the attempt it decides on, and failing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

from .. import signals
from ..core.errors import LockContended
from ..core.leaseset import LeaseSet

__all__ = ["Attempt", "Policy", "announce_contended", "fail"]

log = logging.getLogger("celery_redislock")


@dataclass
class Attempt:
    """One execution's try for its lock or slot, as a policy sees it."""

    task: Any  # the GuardedTask
    request: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    name: str
    lease_set: LeaseSet
    wait_timeout: float | None

    @property
    def kind(self) -> str:
        return str(self.task._redislock_kind)

    @property
    def task_id(self) -> str:
        return str(self.request.id)


class Policy:
    """What a task does about its lock or slot: how it asks, and what it does
    when it does not get it.

    :meth:`acquire` returns whether the lease is held; if not, the task calls
    :meth:`contended`, which must end the run by raising (``Ignore``,
    ``Retry``, :class:`LockContended`...) after leaving a visible state and a
    log line: a contended task is never silently dropped.
    """

    name: ClassVar[str]

    def acquire(self, attempt: Attempt) -> bool:
        return attempt.lease_set.acquire(blocking=False)

    def contended(self, attempt: Attempt) -> NoReturn:
        raise NotImplementedError

    def publish(
        self, task: Any, name: str, task_id: str, args: Any, kwargs: Any,
        call: Mapping[str, Any], send: Callable[[], Any],
    ) -> Any:  # fmt: skip
        """Publish a message of ``task`` (``send`` does it); by default as it is."""
        return send()

    def releaser(self, task: Any, lease_set: LeaseSet, limit: int) -> Callable[[str], bool] | None:
        """How a run of this policy gives its slot back, for
        ``LeaseSet.release_through`` (``limit``: the name's limit now); None:
        a plain release followed by :meth:`after_release`."""
        return None

    def after_release(self, task: Any, name: str, limit: int) -> None:
        """Called after a slot of this policy was given back without its
        :meth:`releaser` (a plain release, or a dead child's lease)."""


def fail(attempt: Attempt, policy: str, message: str) -> NoReturn:
    """End the run with :class:`LockContended` (state ``FAILURE``) and a warning."""
    log.warning("%s[%s] failed: %s", attempt.task.name, attempt.task_id, message)
    raise LockContended(message, attempt.name, policy)


def announce_contended(attempt: Attempt, policy: str) -> None:
    """The ``lock_contended`` signal for this attempt."""
    signals.lock_contended.send(
        sender=attempt.task, task_id=attempt.task_id, name=attempt.name, kind=attempt.kind,
        policy=policy,
    )  # fmt: skip
