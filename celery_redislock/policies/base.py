"""What every contention policy shares: the context its hooks receive, the
hooks themselves, and failing a contended run."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NoReturn, TypeVar

from .. import signals
from ..core.errors import LockContended
from ..core.leaseset import LeaseSet

__all__ = ["Context", "Phase", "Policy", "announce_contended", "fail"]

log = logging.getLogger("celery_redislock")

#: when a policy hook is called: at ``apply_async``, in the run, or after the slot is given back
Phase = Literal["enqueue", "run", "release"]

_T = TypeVar("_T")


@dataclass
class Context:
    """One call or run of a guarded task, as every :class:`Policy` hook sees it.

    Set in every phase: ``phase``, ``task`` (the ``GuardedTask``), ``name``
    (the lock name), ``task_id``, ``args`` and ``kwargs`` (as the phase has
    them: at enqueue as passed to ``apply_async``, possibly None).

    ``enqueue`` (:meth:`Policy.publish`, before the message is published):
        ``call`` (the ``apply_async`` options, headers included) and ``send``
        (publishes the message as Celery would).  ``limit`` is None: a
        callable limit is asked at enqueue only by a policy that needs it.
        No ``request``, ``lease_set`` or ``wait_timeout``.

    ``run`` (:meth:`Policy.acquire`, then :meth:`Policy.contended`, in the
    worker before the body runs):
        ``request`` (Celery's request of the run), ``lease_set`` (this run's,
        not yet held), ``limit`` (taken for this run) and ``wait_timeout``
        (how long a waiting policy waits; None: no limit).  ``call`` is empty,
        ``send`` None.

    ``release`` (:meth:`Policy.releaser`, :meth:`Policy.after_release`,
    once the body returned or raised, or its process died):
        ``lease_set`` (the one the slot is given back through) and ``limit``
        (the name's limit now, or the one the dead run held its slot with).
        ``request`` is the run's request when the run itself releases, None
        when the worker's main process releases for a dead child.  ``call``
        is empty, ``send`` and ``wait_timeout`` None.
    """

    phase: Phase
    task: Any  # the GuardedTask
    name: str
    task_id: str
    args: Any
    kwargs: Any
    limit: int | None = None
    request: Any = None
    lease_set: LeaseSet | None = None
    wait_timeout: float | None = None
    call: Mapping[str, Any] = field(default_factory=dict)
    send: Callable[[], Any] | None = None

    @property
    def kind(self) -> str:
        """``"lock"`` or ``"semaphore"``: what the task takes."""
        return str(self.task._redislock_kind)

    def need_lease_set(self) -> LeaseSet:
        """``lease_set``; a ``RuntimeError`` in a phase that has none (enqueue)."""
        return self._need(self.lease_set, "lease_set")

    def need_limit(self) -> int:
        """``limit``; a ``RuntimeError`` in a phase that has none (enqueue)."""
        return self._need(self.limit, "limit")

    def need_send(self) -> Callable[[], Any]:
        """``send``; a ``RuntimeError`` outside the enqueue phase."""
        return self._need(self.send, "send")

    def _need(self, value: _T | None, what: str) -> _T:
        if value is None:
            raise RuntimeError(f"a policy hook asked for {what}, not set in the {self.phase} phase")
        return value


class Policy:
    """What a task does about its lock or slot: how it asks, what it does when
    it does not get it, how it publishes and how it gives the slot back.

    Every hook receives one :class:`Context` (which fields are set in which
    phase is documented there).

    :meth:`acquire` returns whether the lease is held; if not, the task calls
    :meth:`contended`, which must end the run by raising (``Ignore``,
    ``Retry``, :class:`LockContended`...) after leaving a visible state and a
    log line: a contended task is never silently dropped.
    """

    name: ClassVar[str]

    def acquire(self, ctx: Context) -> bool:
        """Run phase: whether this run now holds ``ctx.lease_set``; by default
        one try, without waiting."""
        return ctx.need_lease_set().acquire(blocking=False)

    def contended(self, ctx: Context) -> NoReturn:
        """Run phase, after :meth:`acquire` returned False: end the run visibly (raise)."""
        raise NotImplementedError

    def publish(self, ctx: Context) -> Any:
        """Enqueue phase: publish the message (``ctx.send`` does it) and return
        its ``AsyncResult``; by default as it is."""
        return ctx.need_send()()

    def releaser(self, ctx: Context) -> Callable[[str], bool] | None:
        """Release phase, at the end of a run: how it gives its slot back, for
        ``LeaseSet.release_through`` (``ctx.limit``: the name's limit now);
        None: a plain release followed by :meth:`after_release`."""
        return None

    def after_release(self, ctx: Context) -> None:
        """Release phase: called after a slot of this policy was given back
        without its :meth:`releaser` (a plain release, or a dead child's lease)."""


def fail(ctx: Context, policy: str, message: str) -> NoReturn:
    """End the run with :class:`LockContended` (state ``FAILURE``) and a warning."""
    log.warning("%s[%s] failed: %s", ctx.task.name, ctx.task_id, message)
    raise LockContended(message, ctx.name, policy)


def announce_contended(ctx: Context, policy: str) -> None:
    """The ``lock_contended`` signal for this run."""
    signals.lock_contended.send(
        sender=ctx.task, task_id=ctx.task_id, name=ctx.name, kind=ctx.kind, policy=policy,
    )  # fmt: skip
