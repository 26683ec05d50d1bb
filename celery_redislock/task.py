"""Celery task base classes that run the body under a lock or a semaphore slot.

::

    @app.task(base=LockedTask, lock_key="cache:{user_id}")
    def refresh_cache(user_id): ...

    @app.task(base=SemaphoreTask, semaphore_key="account:{account_id}", semaphore_limit=5)
    def sync_account(account_id, since=None): ...

What is guaranteed (docs/lifecycle.md has every way a task ends):

* the body runs only while this execution holds the lease (fail closed:
  Redis unreachable at start means the task fails with the Redis error, it
  never runs unlocked); the heartbeat renews it while the body runs;
* the lease is released when the body returns or raises (success, failure,
  ``Ignore``, ``Reject``, soft time limit), and *before* ``self.retry`` /
  ``autoretry_for`` re-publish the task, so a retry never meets its own lock;
* when the pool child dies (SIGKILL, hard time limit, revoke with
  ``terminate``) the worker's main process releases what that child held for
  that task (:mod:`celery_redislock.run.request`);
* a contended task is never silently dropped: each policy
  (:mod:`celery_redislock.policies`) ends it in a visible state with a log
  line and a ``lock_contended`` signal.

Inside the body (``bind=True``), ``self.request.redislock`` is the held
:class:`RedisLock` / :class:`FairSemaphore` in every execution (worker,
``apply()``, ``task_always_eager``), and ``None`` in a plain call
(``refresh_cache(7)``), which runs the body without a lock;
``self.request.redislock_listed`` the held leases of its listed limits
(``limits=``; empty in a plain call).
``semaphore_limit`` may be a callable of the task's arguments, evaluated
for every run (:mod:`celery_redislock.enqueue.limits`).

Not guaranteed: exclusion against a body that outlives a *lost* lease (GC
pause, Redis restart): it is told (``lock_lost`` signal, warning,
``self.request.redislock.owned()`` turns False) but keeps running.

``GuardedTask`` only orchestrates; the parts live in ``options`` (checks and
per-call headers), ``naming`` (key templates), ``enqueue`` (what
``apply_async`` does), ``admission`` (how a run gets its lease), ``dedupe``
(the enqueue marker), ``policies`` (contention) and ``release`` (giving
leases back).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NoReturn

from celery import Task
from celery._state import _task_stack
from celery.exceptions import Ignore, Retry

from .core.capacity import Capacity
from .core.errors import Superseded
from .core.leaseset import LeaseSet
from .core.rate import NO_RATE, Rate, RateTerms
from .core.validation import check_ttl
from .diagnose import FailedClosed
from .enqueue import dedupe, options, publish
from .enqueue.limits import PerCall, check_limit_value, rate_options
from .enqueue.listed_limits import ListedLimit, listed_limits_of
from .enqueue.naming import KeyBuilder, keys_of_task_class
from .parking import StillPending
from .parking.arrival import back_to_the_head
from .parking.message import REQUEST_CONTENT_TYPE
from .parking.states import announce_superseded
from .policies import check_options, check_policy, restore_retries
from .run import admission
from .run.release import release_after_run, release_dead_child
from .run.task_lease_set import lease_set_for

__all__ = ["GuardedTask", "LockedTask", "RateLimitedTask", "SemaphoreTask"]


class GuardedTask(Task):  # type: ignore[misc]
    """Shared machinery of :class:`LockedTask` and :class:`SemaphoreTask`."""

    Request = "celery_redislock.run.request:LockRequest"
    #: a Redis failure at lock time is logged by us in one line: no traceback from Celery
    throws: tuple[type[BaseException], ...] = (FailedClosed,)

    #: lease TTL in seconds; None: ``redislock_default_ttl`` (30 s)
    lock_ttl: float | None = None
    lock_policy: str = "skip"
    #: ``wait`` policy: longest wait before failing with LockContended
    lock_wait_timeout: float | None = 60.0
    #: ``retry`` policy: requeue after countdown + uniform(0, jitter) seconds
    lock_retry_countdown: float = 1.0
    lock_retry_jitter: float = 1.0
    #: ``retry`` policy: requeues before failing with LockContended (None: no limit)
    lock_retry_max: int | None = 100
    #: claim a marker in ``apply_async`` so a second message for a key is not published
    lock_dedupe: bool = False
    lock_dedupe_ttl: float = 600.0
    #: ``keep_latest`` policy: calls of a key within this many seconds of each
    #: other coalesce into one run with the last call's arguments, started this
    #: long after the last call (None: no debounce; docs/coalescing.md)
    lock_debounce: float | None = None
    #: ... and no later than this many seconds after the first (None: no bound)
    lock_debounce_max: float | None = None
    #: ``keep_latest`` policy: at most one start per this many seconds per key
    #: (a rate of one per window; None: no throttle; docs/coalescing.md)
    lock_throttle: float | None = None
    #: True: calls inside the window wait as the key's pending run, which starts
    #: when the window ends with the newest arguments; False: ``apply_async``
    #: inside the window publishes nothing and returns the window's task's result
    lock_throttle_trailing: bool = True
    #: ``keep_latest`` policy: a newer call marks the running holders
    #: superseded (``self.request.redislock.superseded``, ``.checkpoint()``
    #: raises ``Superseded``; a guarded ``FencedResource`` refuses their writes)
    lock_supersede: bool = False
    #: starts per period per key, by every worker and producer together:
    #: ``"20/s"``, ``"100/m"``, ``"1000/h"``, a number per second, or a callable
    #: of the task's arguments returning one; None: no rate (docs/rate.md)
    rate: Any = None
    #: how many may start back to back (1: evenly spaced)
    rate_burst: int = 1
    #: units one start takes: an int in 1..rate_burst, or a callable of the arguments
    rate_cost: Any = 1
    #: limits every run must fit besides its own key: a list of
    #: :class:`~celery_redislock.Limit` (enqueue/listed_limits.py); None: none
    limits: Any = None

    _redislock_kind: ClassVar[str] = ""
    _redislock_key_option: ClassVar[str] = ""
    _redislock_keys: ClassVar[KeyBuilder | None] = None
    _redislock_slots: ClassVar[PerCall[int] | None] = None
    _redislock_rate: ClassVar[PerCall[Rate] | None] = None
    _redislock_cost: ClassVar[PerCall[int] | None] = None
    _redislock_listed: ClassVar[tuple[ListedLimit, ...]] = ()
    #: the names of those of them that are the same for every call
    _redislock_listed_fixed: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        keys = keys_of_task_class(cls, cls._redislock_key_option)
        if keys is not None:  # a task (it defines run): check its options now
            library = next((k for k in cls.__mro__ if k in _LIBRARY_CLASSES), GuardedTask)
            options.refuse_unknown(cls, library, _LIBRARY_CLASSES)
            cls._redislock_keys = keys
            task = getattr(cls, "name", cls.__name__)
            cls._redislock_slots = PerCall(
                cls._redislock_limit_option(),
                keys.signature,
                task,
                "semaphore_limit",
                check_limit_value,
            )
            check_policy(cls.lock_policy)
            options.validate(cls)
            check_options(cls)
            cls._redislock_rate, cls._redislock_cost = rate_options(cls, keys, task)
            cls._redislock_listed = listed_limits_of(cls, keys, task)
            cls._redislock_listed_fixed = frozenset(
                name for listed in cls._redislock_listed if (name := listed.fixed_name)
            )

    @classmethod
    def _redislock_ttl_option(cls) -> float | None:
        return cls.lock_ttl

    @classmethod
    def _redislock_limit_option(cls) -> object:
        return 1

    def redislock_limit(
        self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None
    ) -> int:
        """The slot limit a call with these arguments uses (1 for a :class:`LockedTask`).

        A callable ``semaphore_limit`` is evaluated now (see
        :mod:`celery_redislock.enqueue.limits`).
        """
        slots = type(self)._redislock_slots
        return 1 if slots is None else slots.for_call(args, kwargs)

    def redislock_rate(
        self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None
    ) -> RateTerms:
        """What a call with these arguments asks of its key's rate (``NO_RATE``
        without ``rate``); a callable ``rate`` / ``rate_cost`` is evaluated now."""
        cls = type(self)
        if cls._redislock_rate is None or cls._redislock_cost is None:
            return NO_RATE
        rate = cls._redislock_rate.for_call(args, kwargs)
        return RateTerms(rate, self.rate_burst, cls._redislock_cost.for_call(args, kwargs))

    def redislock_name(self, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None) -> str:
        """The lock name a call with these arguments uses."""
        keys = type(self)._redislock_keys
        if keys is None:
            raise TypeError(f"{self.name} has no {self._redislock_key_option}")
        return keys.build(args or (), kwargs or {})

    def redislock_leaseset(
        self,
        name: str,
        *,
        ttl: float | None = None,
        limit: int | None = None,
        owner_prefix: str = "",
        on_lost: Any = None,
        task_id: str | None = None,
    ) -> LeaseSet:
        """A lease-set object for ``name`` on the app's Redis (for inspection or
        holding); see :func:`celery_redislock.run.task_lease_set.lease_set_for`."""
        return lease_set_for(
            self,
            name,
            ttl=ttl,
            limit=limit,
            owner_prefix=owner_prefix,
            on_lost=on_lost,
            task_id=task_id,
        )

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: Any = None,
        **call: Any,
    ) -> Any:
        """``Task.apply_async`` plus the per-call options of
        :mod:`celery_redislock.enqueue.options`; see
        :func:`celery_redislock.enqueue.publish.publish_call`."""

        def send(task_id: str) -> Any:
            return super(GuardedTask, self).apply_async(
                args, kwargs, task_id, producer, link, link_error, shadow, **call
            )

        return publish.publish_call(self, args, kwargs, task_id, call, send)

    # Celery's DjangoTask (Celery >= 5.4, the app's task class in a Django
    # project) has these; a task declared with base=LockedTask is built on
    # this class instead, and a call site written for DjangoTask must keep
    # working when the task becomes guarded.
    def delay_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """``delay(*args, **kwargs)`` once the current Django transaction
        commits (at once outside a transaction; never if it rolls back), as
        Celery's ``DjangoTask.delay_on_commit``.  Needs Django."""
        _django_transaction().on_commit(lambda: self.delay(*args, **kwargs))

    def apply_async_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """``apply_async(*args, **kwargs)`` once the current Django transaction
        commits, as Celery's ``DjangoTask.apply_async_on_commit``."""
        _django_transaction().on_commit(lambda: self.apply_async(*args, **kwargs))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.called_directly:
            return _run_unlocked(self, args, kwargs)
        # The tracer (worker or apply()) has pushed the request: run the body
        # under the lease, without pushing another request.
        restore_retries(request)
        headers = request.headers
        if headers and REQUEST_CONTENT_TYPE in headers:  # the worker's field, not a header
            request.headers = {
                k: v for k, v in headers.items() if k != REQUEST_CONTENT_TYPE
            } or None
        try:
            lease_set = self._redislock_enter(request, args, kwargs)
        except (Retry, StillPending):  # the task is still to run: its marker stays
            raise
        except BaseException:
            self._redislock_clear_marker(request, args, kwargs)  # this task id is done
            raise
        request.redislock = lease_set
        try:
            result = self.run(*args, **kwargs)
        except Retry:
            self._redislock_release(request, lease_set, "retry")
            raise
        except StillPending:  # back in the park (redislock_pause): still to run
            self._redislock_release(request, lease_set, "paused")
            raise
        except Superseded as exc:  # checkpoint(): a newer call took over
            self._redislock_finish(request, lease_set, args, kwargs)
            announce_superseded(self, [request.id], exc.by, lease_set.name, "run")
            raise Ignore() from None  # its state is SUPERSEDED, not FAILURE
        except BaseException:
            self._redislock_finish(request, lease_set, args, kwargs)
            raise
        self._redislock_finish(request, lease_set, args, kwargs)
        return result

    def redislock_pause(self, seconds: float) -> NoReturn:
        """Inside a run (``bind=True``): an upstream said "retry after
        ``seconds``" (a 429's ``Retry-After``).  Pauses this run's key for every
        worker (no task of it starts before the pause ends, a pause only
        lengthens) and puts this task back at the head of the key's park, same
        task id, no countdown retry; the run ends here (state ``PARKED``) and
        its slot is given back.  Policy ``park`` only (the park is where the
        task waits): other policies get a ``TypeError``."""
        check_ttl(seconds, "pause")
        request = self.request
        lease_set = getattr(request, "redislock", None)
        if lease_set is None or request.called_directly or request.is_eager:
            raise RuntimeError(f"{self.name}: redislock_pause is for a run under its lease")
        policy = getattr(request, "redislock_policy", None)
        if getattr(policy, "name", None) != "park":
            raise TypeError(
                f"{self.name}: redislock_pause needs lock_policy 'park' (the task waits in "
                "the park); pause the key with RateLimiter.pause and retry otherwise"
            )
        raise back_to_the_head(
            self, request, request.args, request.kwargs, lease_set, float(seconds)
        )

    def retry(self, *args: Any, throw: bool = True, **kwargs: Any) -> Any:
        """``Task.retry``, releasing the lease *before* the retry is published,
        except under a policy whose retry keeps the key's turn (``keep_latest``:
        the retry is stored ahead of the key's waiting work, and the lease is
        given back when the run ends).

        With ``throw=False`` the body goes on running, so the lease is kept;
        the retried run finds it held by its own task id and requeues itself
        until it is free (see "redelivery" in docs/lifecycle.md).
        """
        request = self.request
        lease_set = getattr(request, "redislock", None)
        keeps_turn = getattr(
            getattr(request, "redislock_policy", None), "retry_keeps_its_turn", False
        )
        if throw and lease_set is not None and not request.called_directly and not keeps_turn:
            self._redislock_release(request, lease_set, "retry")
        return super().retry(*args, throw=throw, **kwargs)

    def _redislock_enter(self, request: Any, args: Any, kwargs: Any) -> LeaseSet:
        return admission.enter(self, request, args, kwargs)

    def _redislock_finish(self, request: Any, lease_set: LeaseSet, args: Any, kwargs: Any) -> None:
        self._redislock_release(request, lease_set, "finished")
        self._redislock_clear_marker(request, args, kwargs)

    def _redislock_release(self, request: Any, lease_set: LeaseSet, reason: str) -> None:
        release_after_run(self, request, lease_set, reason)

    def _redislock_clear_marker(self, request: Any, args: Any, kwargs: Any) -> None:
        if options.header(request, dedupe.HEADER):
            dedupe.clear_for(self, request.id, args, kwargs)

    def redislock_clear_marker(self, task_id: str, args: Any, kwargs: Any) -> bool:
        """Delete the enqueue marker of this call's key if ``task_id`` holds it."""
        return dedupe.clear_for(self, task_id, args, kwargs)

    def redislock_cleanup(
        self,
        task_id: str,
        pid: int,
        args: Any,
        kwargs: Any,
        headers: Mapping[str, Any],
        reason: str,
    ) -> int:
        """Release what ``task_id`` held in the dead child ``pid`` (worker main process)."""
        return release_dead_child(self, task_id, pid, args, kwargs, headers, reason)


def _run_unlocked(task: GuardedTask, args: Any, kwargs: Any) -> Any:
    """A plain function call: no lock, and ``self.request.redislock`` is None."""
    _task_stack.push(task)
    task.push_request(args=args, kwargs=kwargs, redislock=None, redislock_listed=[])
    try:
        return task.run(*args, **kwargs)
    finally:
        task.pop_request()
        _task_stack.pop()


class LockedTask(GuardedTask):
    """Runs the body under a :class:`RedisLock` named by ``lock_key``.

    Default contention policy: ``skip``.
    """

    lock_key: Any = None
    lock_policy = "skip"
    _redislock_kind = "lock"
    _redislock_key_option = "lock_key"


class SemaphoreTask(GuardedTask):
    """Runs the body holding one of ``semaphore_limit`` slots of a
    :class:`FairSemaphore` named by ``semaphore_key``.

    Default contention policy: ``park`` (docs/park.md; ``lock_policy="retry"``
    keeps the earlier requeue behaviour).  ``semaphore_ttl`` is an alias of
    ``lock_ttl`` (it wins when both are set).  ``semaphore_limit`` is an
    ``int >= 1`` or a callable of the task's arguments, evaluated per run
    (:mod:`celery_redislock.enqueue.limits`); a changed value applies to the next
    acquisitions.
    """

    semaphore_key: Any = None
    #: an int >= 1, or a callable of the task's arguments (by keyword) returning one
    semaphore_limit: Any = None
    semaphore_ttl: float | None = None
    lock_policy = "park"
    _redislock_kind = "semaphore"
    _redislock_key_option = "semaphore_key"

    @classmethod
    def _redislock_ttl_option(cls) -> float | None:
        return cls.semaphore_ttl if cls.semaphore_ttl is not None else cls.lock_ttl

    @classmethod
    def _redislock_limit_option(cls) -> object:
        return cls.semaphore_limit


class RateLimitedTask(GuardedTask):
    """Runs the body once its key's rate admits the start: at most ``rate``
    starts per period per ``rate_key``, by every worker and producer
    together, without a concurrency cap (combine ``rate`` with a
    :class:`SemaphoreTask` for both).

    Default contention policy: ``park`` (an over-rate task waits in Redis
    until its time, docs/rate.md).  ``rate`` and ``rate_cost`` may be
    callables of the task's arguments, as ``semaphore_limit`` can.
    """

    rate_key: Any = None
    lock_policy = "park"
    _redislock_kind = "rate"
    _redislock_key_option = "rate_key"

    @classmethod
    def _redislock_limit_option(cls) -> object:
        return Capacity.rate().slots  # no cap: see core/capacity.py


_LIBRARY_CLASSES: tuple[type, ...] = (LockedTask, SemaphoreTask, RateLimitedTask)


def _django_transaction() -> Any:
    """``django.db.transaction``, imported when a Django project asks for it."""
    return importlib.import_module("django.db.transaction")
