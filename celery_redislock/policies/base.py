"""What every contention policy shares: the context its hooks receive, the
hooks themselves, and failing a contended run."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NoReturn

from .. import signals
from ..core.errors import LockContended
from ..core.leaseset import LeaseSet
from ..core.owners import new_owner
from ..core.park import Parking, Verdict
from ..core.rate import NO_RATE, RateTerms

__all__ = ["Context", "Phase", "Policy", "announce_contended", "fail", "give_back", "take"]

log = logging.getLogger("celery_redislock")

#: when a policy hook is called: at ``apply_async``, in the run, or after the slot is given back
Phase = Literal["enqueue", "run", "release"]


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
        not yet held), ``limit`` (taken for this run), ``rate`` (what the run
        asks of its key's rate, ``NO_RATE`` without one) and ``wait_timeout``
        (how long a waiting policy waits; None: no limit).  After a refused
        :meth:`Policy.acquire`, ``rate_wait`` is the seconds until the rate
        admits the run when the rate (or a pause) refused it, None when the
        slot did, and ``refused_by`` the listed limit that refused it (None:
        its own key did).  ``call`` is empty, ``send`` None.

    ``release`` (:meth:`Policy.release` once the body returned or raised,
    :meth:`Policy.after_release` once the worker released for a dead child):
        ``lease_set`` (the one the slot is given back through) and ``limit``
        (the name's limit now, or the one the dead run held its slot with).
        ``request`` is the run's request when the run itself releases, None
        when the worker's main process releases for a dead child.  ``woke``:
        the run's listed limits (``limits=``) whose slot, given back first,
        went to a name that waited for it, each with the number of tasks
        published for the names woken (on their way to take their slots)
        and the Redis time of the hand-off (us; ``limit_release.lua``).
        ``call`` is empty, ``send`` and ``wait_timeout`` None.
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
    rate: RateTerms = NO_RATE
    rate_wait: float | None = None
    #: the listed limit (``limits=``) that refused this run, None when its own key did
    refused_by: str | None = None
    #: the limit this run asked of it (as passed: an override of it applies)
    refused_limit: int | None = None
    #: release phase: the listed limits whose slot went to a name that
    #: waited, each with the number of tasks published for the names woken
    woke: Sequence[tuple[LeaseSet, int, int]] = ()

    @property
    def kind(self) -> str:
        """``"lock"``, ``"semaphore"`` or ``"rate"``: what the task takes."""
        return str(self.task._redislock_kind)

    @property
    def waited(self) -> str:
        """How long a waiting run that gave up waited, for its error: a rate
        that admits it only after the wait timeout is given up at once."""
        if self.rate_wait is not None:
            return f"past the wait timeout of {self.wait_timeout} s"
        return f"after waiting {self.wait_timeout} s"

    @property
    def refusal(self) -> str:
        """Why a refused run was refused, for log lines and errors."""
        if self.refused_by is not None:
            if self.rate_wait is not None:
                return (
                    f"listed limit {self.refused_by!r} is over its rate (admitted in "
                    f"{self.rate_wait:.3f} s)"
                )
            return f"listed limit {self.refused_by!r} is full"
        if self.rate_wait is not None:
            return (
                f"{self.name!r} is over its rate {self.rate.rate} (admitted in "
                f"{self.rate_wait:.3f} s)"
            )
        return f"{self.kind} {self.name!r} is held"

    def need_lease_set(self) -> LeaseSet:
        """``lease_set``; a ``RuntimeError`` in a phase that has none (enqueue)."""
        if self.lease_set is None:
            raise self._missing("lease_set")
        return self.lease_set

    def need_limit(self) -> int:
        """``limit``; a ``RuntimeError`` in a phase that has none (enqueue)."""
        if self.limit is None:
            raise self._missing("limit")
        return self.limit

    def need_send(self) -> Callable[[], Any]:
        """``send``; a ``RuntimeError`` outside the enqueue phase."""
        if self.send is None:
            raise self._missing("send")
        return self.send

    def _missing(self, what: str) -> RuntimeError:
        return RuntimeError(f"a policy hook asked for {what}, not set in the {self.phase} phase")


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
    #: Whether a run's own ``self.retry()`` keeps the key's turn: the run holds
    #: its lease while the retry is published (``publish`` stores it ahead of
    #: the key's waiting work) and gives it back when the run ends.  Otherwise
    #: the run gives its lease back first, so a retry without a countdown does
    #: not find its own run still holding the key.
    retry_keeps_its_turn: ClassVar[bool] = False
    #: The task options this policy owns, beyond ``lock_policy``: it validates
    #: them (:meth:`check_options`) and no other policy reads them.
    options: ClassVar[tuple[str, ...]] = ()
    #: Why a run of this policy cannot also take a rate ("": it can).
    refuses_rate: ClassVar[str] = ""
    #: Whether its calls coalesce per key at enqueue (``lock_throttle``'s
    #: window without trailing run is decided there).
    coalesces: ClassVar[bool] = False
    #: Whether an eager run of it (no broker to come back through) waits up
    #: to ``wait_timeout`` for its slot, and for its listed limits too.
    waits_when_eager: ClassVar[bool] = False

    def check_options(self, task: Any) -> None:
        """At decoration, for every guarded task class (``task``), whatever its
        policy: refuse :attr:`options` on a task of another policy, and
        validate them on a task of this one; a precise ``ValueError`` /
        ``TypeError`` naming the task and the option.  By default nothing."""

    def check_other_policy(self, task: Any, policy: Policy) -> None:
        """A ``ValueError`` when a call of ``task`` (declared with this policy)
        runs by another ``policy`` (``lock_policy=`` per call) that would drop
        what this policy's options promise.  By default nothing."""

    def check_rate(self, task_name: str, rate: object) -> None:
        """A ``ValueError`` when a run of this policy would take ``rate``
        (not None) and the policy cannot (:attr:`refuses_rate`)."""
        if rate is not None and self.refuses_rate:
            raise ValueError(
                f"task {task_name}: lock_policy={self.name!r} does not combine with rate "
                f"({self.refuses_rate})"
            )

    def acquire(self, ctx: Context) -> bool:
        """Run phase: whether this run now holds ``ctx.lease_set`` (and its
        rate's units); by default one try, without waiting."""
        return take(ctx, blocking=False)

    def contended(self, ctx: Context) -> NoReturn:
        """Run phase, after :meth:`acquire` returned False: end the run visibly (raise)."""
        raise NotImplementedError

    def waits_for_listed(self, ctx: Context) -> bool:
        """Run phase, a listed limit having refused the run: whether it waits
        for the whole set in this process (everything given back, taken
        again a little later, until ``wait_timeout``; never holding one
        while it waits for another).  By default only an eager run of a
        policy that :attr:`waits_when_eager`."""
        return bool(ctx.request.is_eager) and self.waits_when_eager

    def refused_by_listed(self, ctx: Context) -> None:
        """Run phase: the run holds its own lease, and its listed limit
        ``ctx.refused_by`` refused it (it holds none of them).  By default the
        own lease is given back (no signal: the run never had them all) and
        :meth:`contended` follows; a policy may instead end the run here by
        raising (``park``: back to its park, to wait for the limit)."""
        give_back([ctx.need_lease_set()])

    def publish(self, ctx: Context) -> Any:
        """Enqueue phase: publish the message (``ctx.send`` does it) and return
        its ``AsyncResult``; by default as it is."""
        return ctx.need_send()()

    def release(self, ctx: Context) -> None:
        """Release phase, at the end of a run: give ``ctx.lease_set``'s slot
        back (``ctx.limit``: the name's limit now); raises as
        ``LeaseSet.release`` does (``NotOwned``, ``LockLost``, a Redis
        error).  By default a plain release (``release.lua``)."""
        ctx.need_lease_set().release()

    def after_release(self, ctx: Context) -> None:
        """Release phase: called after the worker's main process gave back a
        slot of this policy that a dead child held (no :meth:`release` ran)."""


def take(ctx: Context, blocking: bool) -> bool:
    """Run phase: take this run's slot, and with a rate its rate's units, in one
    Redis call (both or neither); ``blocking`` waits up to ``ctx.wait_timeout``
    (eager runs of the policies that otherwise wait in the broker or the park).
    A run refused by its rate sets ``ctx.rate_wait`` and sends ``lock_rate_limited``."""
    lease_set = ctx.need_lease_set()
    if ctx.rate.rate is None:
        if blocking:
            return lease_set.acquire(blocking=True, timeout=ctx.wait_timeout)
        return lease_set.acquire(blocking=False)
    parking = Parking(lease_set.client, lease_set.keys.prefix, lease_set.name)
    deadline = None if ctx.wait_timeout is None else time.monotonic() + ctx.wait_timeout
    while True:
        owner, sent_at = new_owner(lease_set.owner_prefix), time.monotonic()
        admission = parking.try_hold(
            lease_set.capacity, owner, lease_set.ttl, lease_set.holder_meta(), ctx.rate
        )
        if admission.verdict is Verdict.HELD:
            ctx.rate_wait = None
            held = lease_set.adopt(owner, admission.token, sent_at)
            if admission.wait:  # starts keep the rate, not only admissions
                time.sleep(admission.wait)
            return held
        rated = admission.verdict is Verdict.RATE
        ctx.rate_wait = admission.wait if rated else None
        pause = admission.wait if rated else 0.05  # a slot: no time to wait for, poll
        if not blocking or (deadline is not None and time.monotonic() + pause > deadline):
            if rated:
                signals.lock_rate_limited.send(
                    sender=ctx.task,
                    task_id=ctx.task_id,
                    name=ctx.name,
                    kind=ctx.kind,
                    retry_after=admission.wait,
                    where="run",
                )
            return False
        time.sleep(pause)


def give_back(held: Sequence[LeaseSet]) -> None:
    """Release leases a refused run took (no signal: it never had them all);
    never raises: one it cannot give back (lost, Redis unreachable) frees
    within its ttl, since the heartbeat dropped it."""
    for lease_set in held:
        try:
            lease_set.release()
        except Exception as exc:
            log.warning(
                "could not give back %r (%r); it expires within its ttl", lease_set.name, exc
            )


def fail(ctx: Context, policy: str, message: str) -> NoReturn:
    """End the run with :class:`LockContended` (state ``FAILURE``) and a warning."""
    log.warning("%s[%s] failed: %s", ctx.task.name, ctx.task_id, message)
    raise LockContended(message, ctx.refused_by or ctx.name, policy)


def announce_contended(ctx: Context, policy: str) -> None:
    """The ``lock_contended`` signal for this run."""
    signals.lock_contended.send(
        sender=ctx.task,
        task_id=ctx.task_id,
        name=ctx.name,
        kind=ctx.kind,
        policy=policy,
        refused_by=ctx.refused_by,
    )
