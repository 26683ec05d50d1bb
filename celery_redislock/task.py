"""Celery task base classes that run the body under a lock or a semaphore slot.

::

    @app.task(base=LockedTask, lock_key="cache:{user_id}")
    def refresh_cache(user_id): ...

    @app.task(base=SemaphoreTask, semaphore_key="account:{account_id}", semaphore_limit=5)
    def sync_account(account_id, since=None): ...

What is guaranteed (see the README's "life cycle" for every way a task ends):

* the body runs only while this execution holds the lease (fail closed:
  Redis unreachable at start means the task fails with the Redis error, it
  never runs unlocked); the heartbeat renews it while the body runs;
* the lease is released when the body returns or raises (success, failure,
  ``Ignore``, ``Reject``, soft time limit), and *before* ``self.retry`` /
  ``autoretry_for`` re-publish the task, so a retry never meets its own lock;
* when the pool child dies (SIGKILL, hard time limit, revoke with
  ``terminate``) the worker's main process releases what that child held for
  that task (see :mod:`celery_redislock.request`);
* a contended task is never silently dropped: ``skip`` leaves state
  ``SKIPPED`` and a log line, ``retry`` shows ``RETRY``, ``raise`` and an
  exhausted ``wait`` / ``retry`` fail with :class:`LockContended`.

Not guaranteed: exclusion against a body that outlives a *lost* lease (GC
pause, Redis restart): it is told (``lock_lost`` signal, warning,
``self.request.redislock.owned()`` turns False) but keeps running.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import random
import re
import sys
import time
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from celery import Task
from celery.exceptions import Ignore, Retry
from redis.exceptions import RedisError

from . import dedupe, signals
from .client import client_for
from .config import Settings
from .errors import LockContended, LockLost, NotOwned
from .keybuilder import KeyBuilder, run_signature
from .lease import Lease
from .leaseset import _HOSTNAME, LeaseSet, _check_timeout, _check_ttl
from .lock import RedisLock
from .semaphore import FairSemaphore

__all__ = [
    "HEADER_DEDUPE",
    "HEADER_POLICY",
    "HEADER_REQUEUES",
    "HEADER_TTL",
    "HEADER_WAIT_TIMEOUT",
    "POLICIES",
    "SKIPPED",
    "GuardedTask",
    "LockedTask",
    "SemaphoreTask",
    "owner_prefix",
]

log = logging.getLogger("celery_redislock")

POLICIES = ("skip", "retry", "wait", "raise")
SKIPPED = "SKIPPED"

HEADER_POLICY = "redislock_policy"
HEADER_TTL = "redislock_ttl"
HEADER_WAIT_TIMEOUT = "redislock_wait_timeout"
HEADER_DEDUPE = "redislock_dedupe"
HEADER_REQUEUES = "redislock_requeues"

#: per-call options of ``apply_async`` -> the message header carrying them
CALL_OPTIONS = {
    "lock_policy": HEADER_POLICY,
    "lock_ttl": HEADER_TTL,
    "semaphore_ttl": HEADER_TTL,
    "lock_wait_timeout": HEADER_WAIT_TIMEOUT,
    "lock_dedupe": HEADER_DEDUPE,
}

_HOST_TAG = f"{zlib.crc32(_HOSTNAME.encode('utf-8')):08x}"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def _task_tag(task_id: str) -> str:
    return _UNSAFE.sub("_", str(task_id))[:64] + "."


def owner_prefix(task_id: str, pid: int) -> str:
    """Owner id prefix of the leases one execution holds: task id, host, pid.

    The worker's main process recomputes it from the dead child's pid, so a
    redelivered execution of the same task id elsewhere is never released.
    """
    return f"{_task_tag(task_id)}{_HOST_TAG}.{pid}."


def check_policy(policy: object, what: str = "lock_policy") -> str:
    if policy not in POLICIES:
        raise ValueError(f"{what} must be one of {', '.join(POLICIES)}; got {policy!r}")
    return str(policy)


def _check_nonneg(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{what} must be a number >= 0, got {value!r}")
    return float(value)


def _header(request: Any, name: str) -> Any:
    value = getattr(request, name, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(name)
    return value


def _delay_of(options: Mapping[str, Any]) -> float:
    """Seconds until a message sent with these options becomes due."""
    countdown, eta = options.get("countdown"), options.get("eta")
    if isinstance(countdown, (int, float)) and countdown > 0:
        return float(countdown)
    if isinstance(eta, datetime.datetime):
        now = datetime.datetime.now(eta.tzinfo or None)
        return max(0.0, (eta - now).total_seconds())
    return 0.0


def _run_of(cls: type) -> tuple[Any, bool] | None:
    run = cls.__dict__.get("run")
    if run is None:
        return None
    if isinstance(run, staticmethod):
        return run.__func__, False
    return run, True


class GuardedTask(Task):  # type: ignore[misc]
    """Shared machinery of :class:`LockedTask` and :class:`SemaphoreTask`."""

    Request = "celery_redislock.request:LockRequest"

    #: lease TTL in seconds; None: ``redislock_default_ttl`` (30 s)
    lock_ttl: float | None = None
    lock_policy: str = "skip"
    #: ``wait`` policy: longest wait before failing with LockContended
    lock_wait_timeout: float = 60.0
    #: ``retry`` policy: requeue after countdown + uniform(0, jitter) seconds
    lock_retry_countdown: float = 1.0
    lock_retry_jitter: float = 1.0
    #: ``retry`` policy: requeues before failing with LockContended (None: no limit)
    lock_retry_max: int | None = 100
    #: claim a marker in ``apply_async`` so a second message for a key is not published
    lock_dedupe: bool = False
    lock_dedupe_ttl: float = 600.0

    _redislock_kind: ClassVar[str] = ""
    _redislock_key_option: ClassVar[str] = ""
    _redislock_keys: ClassVar[KeyBuilder | None] = None

    # -- definition time ----------------------------------------------------

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found = _run_of(cls)
        if found is not None:
            cls._redislock_validate(*found)

    @classmethod
    def _redislock_validate(cls, run: Any, bound_self: bool) -> None:
        spec = getattr(cls, cls._redislock_key_option, None)
        if spec is None:
            raise TypeError(
                f"task {getattr(cls, 'name', None) or cls.__name__}: {cls.__mro__[1].__name__} "
                f"needs {cls._redislock_key_option}= (a template or a callable)"
            )
        try:
            signature = run_signature(run, bound_self)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"cannot read the signature of {run!r}: {exc}") from exc
        cls._redislock_keys = KeyBuilder(spec, signature, cls._redislock_key_option)
        check_policy(cls.lock_policy)
        ttl = cls._redislock_ttl_option()
        if ttl is not None:
            _check_ttl(ttl, "lock ttl")
        _check_timeout(cls.lock_wait_timeout, "lock_wait_timeout")
        _check_nonneg(cls.lock_retry_countdown, "lock_retry_countdown")
        _check_nonneg(cls.lock_retry_jitter, "lock_retry_jitter")
        if cls.lock_retry_max is not None and (
            isinstance(cls.lock_retry_max, bool)
            or not isinstance(cls.lock_retry_max, int)
            or cls.lock_retry_max < 0
        ):
            raise ValueError(f"lock_retry_max must be an int >= 0 or None: {cls.lock_retry_max!r}")
        _check_ttl(cls.lock_dedupe_ttl, "lock_dedupe_ttl")
        cls._redislock_limit()

    @classmethod
    def _redislock_ttl_option(cls) -> float | None:
        return cls.lock_ttl

    @classmethod
    def _redislock_limit(cls) -> int:
        return 1

    # -- names and lease objects ---------------------------------------------

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
        owner_prefix: str = "",
        settings: Settings | None = None,
        client: Any = None,
        on_lost: Any = None,
        task_id: str | None = None,
    ) -> LeaseSet:
        """A lease-set object for ``name`` on the app's Redis (for inspection or holding).

        The holder metadata (shown by ``celery redislock status``) names the
        task, the task id and the slot limit.
        """
        if client is None or settings is None:
            client, settings = client_for(self.app)
        ttl = ttl or self._redislock_ttl_option() or settings.default_ttl
        meta: dict[str, Any] = {"task": self.name, "limit": self._redislock_limit()}
        if task_id is not None:
            meta["task_id"] = task_id
        common: dict[str, Any] = {
            "ttl": ttl,
            "prefix": settings.prefix,
            "owner_prefix": owner_prefix,
            "on_lost": on_lost,
            "meta": meta,
        }
        if self._redislock_kind == "lock":
            return RedisLock(client, name, **common)
        return FairSemaphore(client, name, self._redislock_limit(), **common)

    # -- enqueue ----------------------------------------------------------------

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: Any = None,
        **options: Any,
    ) -> Any:
        """``Task.apply_async`` plus per-call ``lock_policy``, ``lock_ttl``
        (``semaphore_ttl``), ``lock_wait_timeout`` and ``lock_dedupe``.

        They travel in message headers, so the worker-side check honours them.
        The lock name is built here too, so bad arguments fail at call time.
        With de-duplication, a call whose key already has a queued or running
        message returns that message's ``AsyncResult`` and publishes nothing.
        """
        call = {k: options.pop(k) for k in list(options) if k in CALL_OPTIONS}
        headers = dict(options.pop("headers", None) or {})
        for option, value in call.items():
            if option == "lock_policy":
                check_policy(value)
            elif option in ("lock_ttl", "semaphore_ttl"):
                _check_ttl(value, option)
            elif option == "lock_wait_timeout":
                _check_timeout(value, option)
            elif not isinstance(value, bool):
                raise TypeError(f"lock_dedupe must be a bool, got {value!r}")
            headers[CALL_OPTIONS[option]] = value
        name = self.redislock_name(args, kwargs)
        use_dedupe = bool(headers.pop(HEADER_DEDUPE, self.lock_dedupe))
        request = self.request
        republish = task_id is not None and not request.called_directly and task_id == request.id
        claimed = False
        if republish and _header(request, HEADER_DEDUPE):
            headers[HEADER_DEDUPE] = 1  # a retry or requeue keeps the marker it holds
        elif use_dedupe and not self.app.conf.task_always_eager:
            from celery.utils import uuid

            task_id = task_id or uuid()
            client, settings = client_for(self.app)
            ttl = self.lock_dedupe_ttl + _delay_of(options)
            holder = dedupe.claim(client, settings.prefix, name, task_id, ttl)
            if holder is not None:
                log.info(
                    "%s: not enqueued, %r already has message %s queued or running (dedupe)",
                    self.name,
                    name,
                    holder,
                )
                signals.lock_contended.send(
                    sender=self, task_id=task_id, name=name, kind=self._redislock_kind,
                    policy="dedupe",
                )  # fmt: skip
                return self.AsyncResult(holder)
            claimed = True
            headers[HEADER_DEDUPE] = 1
        if headers:
            options["headers"] = headers
        try:
            return super().apply_async(
                args, kwargs, task_id, producer, link, link_error, shadow, **options
            )
        except BaseException:
            if claimed and task_id is not None:
                # Not published: give the key back (best effort; else its TTL does).
                with contextlib.suppress(RedisError):
                    client, settings = client_for(self.app)
                    dedupe.clear(client, settings.prefix, name, task_id)
            raise

    # -- run time -----------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.called_directly:
            # A plain function call (``task(...)``), not an execution: no lock.
            return super().__call__(*args, **kwargs)
        # The tracer (worker or apply()) has pushed the request: run the body
        # under the lease, without pushing another request.
        try:
            lease_set = self._redislock_enter(request, args, kwargs)
        except Retry:
            raise
        except BaseException:
            # Skipped, failed by policy, or Redis unreachable: this task id is done.
            self._redislock_clear_marker(request, args, kwargs)
            raise
        request.redislock = lease_set
        try:
            return self.run(*args, **kwargs)
        finally:
            exc = sys.exc_info()[1]
            retrying = isinstance(exc, Retry)
            self._redislock_exit(request, lease_set, "retry" if retrying else "finished")
            if not retrying:
                self._redislock_clear_marker(request, args, kwargs)

    def retry(
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: Any = None,
        throw: bool = True,
        eta: Any = None,
        countdown: Any = None,
        max_retries: Any = None,
        **options: Any,
    ) -> Any:
        """``Task.retry``, releasing the lease *before* the retry is published.

        So the retried message can never meet this execution's lease.  With
        ``throw=False`` the body goes on running, so the lease is kept; the
        retried run finds it held by its own task id and requeues itself until
        it is free (see "redelivery" in the README).
        """
        request = self.request
        lease_set = getattr(request, "redislock", None)
        if throw and lease_set is not None and not request.called_directly:
            self._redislock_exit(request, lease_set, "retry")
        return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)

    def _redislock_enter(self, request: Any, args: Any, kwargs: Any) -> LeaseSet:
        name = self.redislock_name(args, kwargs)
        kind = self._redislock_kind
        policy = check_policy(_header(request, HEADER_POLICY) or self.lock_policy)
        ttl_header = _header(request, HEADER_TTL)
        ttl = _check_ttl(ttl_header, "lock ttl") if ttl_header is not None else None
        wait_header = _header(request, HEADER_WAIT_TIMEOUT)
        wait_timeout = self.lock_wait_timeout if wait_header is None else float(wait_header)
        task_id = request.id
        try:
            client, settings = client_for(self.app)
            lease_set = self.redislock_leaseset(
                name,
                ttl=ttl,
                owner_prefix=owner_prefix(task_id, os.getpid()),
                settings=settings,
                client=client,
                on_lost=self._redislock_on_lost(task_id),
                task_id=task_id,
            )
            redelivered = bool((request.delivery_info or {}).get("redelivered"))
            if redelivered or request.retries:
                tag = _task_tag(task_id)
                mine = [h for h in lease_set.holders() if h.owner.startswith(tag)]
                if mine:
                    # An earlier delivery of this very task id still holds it
                    # (redelivery after visibility_timeout, or retry(throw=False)).
                    self._redislock_contended(task_id, name, "redelivered")
                    delay = min(
                        max(h.expires_in for h in mine), max(self.lock_retry_countdown, 0.5)
                    ) + random.uniform(0, self.lock_retry_jitter)
                    self._redislock_requeue(request, args, kwargs, name, delay, count=False)
            blocking = policy == "wait" or (policy == "retry" and request.is_eager)
            started = time.monotonic()
            if blocking:
                acquired = lease_set.acquire(blocking=True, timeout=wait_timeout)
            else:
                acquired = lease_set.acquire(blocking=False)
        except RedisError as exc:
            log.error(
                "%s[%s] not run: Redis for lock %r unreachable (fail closed): %r",
                self.name,
                task_id,
                name,
                exc,
            )
            raise
        if acquired:
            signals.lock_acquired.send(
                sender=self, task_id=task_id, name=name, token=lease_set.token, kind=kind,
                waited=time.monotonic() - started,
            )  # fmt: skip
            return lease_set
        self._redislock_contended(task_id, name, policy)
        if policy == "skip":
            log.warning(
                "%s[%s] skipped: %s %r is held (policy skip)", self.name, task_id, kind, name
            )
            self.update_state(
                task_id=task_id, state=SKIPPED, meta={"lock": name, "kind": kind, "policy": "skip"}
            )
            raise Ignore()
        if policy == "retry":
            countdown = self.lock_retry_countdown + random.uniform(0, self.lock_retry_jitter)
            self._redislock_requeue(request, args, kwargs, name, countdown, count=True)
        if policy == "wait":
            message = f"{kind} {name!r} still held after waiting {wait_timeout} s (policy wait)"
        else:
            message = f"{kind} {name!r} is held (policy raise)"
        log.warning("%s[%s] failed: %s", self.name, task_id, message)
        raise LockContended(message, name, policy)

    def _redislock_requeue(
        self, request: Any, args: Any, kwargs: Any, name: str, countdown: float, count: bool
    ) -> None:
        """Publish this task again (same id) after ``countdown`` and raise ``Retry``.

        Counts against ``lock_retry_max`` (a header), never ``max_retries``.
        """
        headers = dict(request.headers or {})
        headers.pop("redelivered", None)
        done = int(headers.get(HEADER_REQUEUES) or 0)
        if count:
            done += 1
            if self.lock_retry_max is not None and done > self.lock_retry_max:
                message = (
                    f"{self._redislock_kind} {name!r} still held after "
                    f"{self.lock_retry_max} requeues (policy retry)"
                )
                log.warning("%s[%s] failed: %s", self.name, request.id, message)
                raise LockContended(message, name, "retry")
        headers[HEADER_REQUEUES] = done
        signature = self.signature_from_request(
            request, args, kwargs, countdown=countdown, retries=request.retries, headers=headers
        )
        log.info(
            "%s[%s] requeued in %.2f s: %s %r is held (requeue %d)",
            self.name,
            request.id,
            countdown,
            self._redislock_kind,
            name,
            done,
        )
        signature.apply_async()
        raise Retry(f"{self._redislock_kind} {name!r} is held; requeued", when=countdown)

    def _redislock_contended(self, task_id: str, name: str, policy: str) -> None:
        signals.lock_contended.send(
            sender=self, task_id=task_id, name=name, kind=self._redislock_kind, policy=policy
        )

    def _redislock_on_lost(self, task_id: str) -> Any:
        def on_lost(lease: Lease) -> None:
            signals.lock_lost.send(
                sender=self, task_id=task_id, name=lease.name, token=lease.token,
                kind=self._redislock_kind, reason=lease.lost_reason,
            )  # fmt: skip

        return on_lost

    def _redislock_exit(self, request: Any, lease_set: LeaseSet, reason: str) -> None:
        token = lease_set.token
        if token is None:
            return  # released already (by retry())
        held = True
        try:
            lease_set.release()
        except LockLost:
            held = False
            log.warning(
                "%s[%s]: lease on %r (fencing token %s) was lost before release",
                self.name,
                request.id,
                lease_set.name,
                token,
            )
        except NotOwned:
            return
        except RedisError as exc:
            # The heartbeat no longer renews it: it frees within its TTL.
            log.error(
                "%s[%s]: could not release %r (%r); it expires within its ttl",
                self.name,
                request.id,
                lease_set.name,
                exc,
            )
            held = False
        signals.lock_released.send(
            sender=self, task_id=request.id, name=lease_set.name, token=token,
            kind=self._redislock_kind, reason=reason, held=held,
        )  # fmt: skip

    def _redislock_clear_marker(self, request: Any, args: Any, kwargs: Any) -> None:
        if _header(request, HEADER_DEDUPE):
            self.redislock_clear_marker(request.id, args, kwargs)

    def redislock_clear_marker(self, task_id: str, args: Any, kwargs: Any) -> bool:
        """Delete the enqueue marker of this call's key if ``task_id`` holds it."""
        try:
            name = self.redislock_name(args, kwargs)
            client, settings = client_for(self.app)
            return dedupe.clear(client, settings.prefix, name, task_id)
        except (TypeError, ValueError):
            return False  # no key for these arguments: no marker was claimed
        except RedisError as exc:
            log.error("could not clear the dedupe marker of %s (%r); it expires", task_id, exc)
            return False

    # -- clean-up for a dead pool child (worker main process) -----------------

    def redislock_cleanup(
        self,
        task_id: str,
        pid: int,
        args: Any,
        kwargs: Any,
        headers: Mapping[str, Any],
        reason: str,
    ) -> int:
        """Release what the execution of ``task_id`` in process ``pid`` held.

        Run by the worker's main process when that child died or is being
        killed.  Only owners with that task id, host and pid are touched, so
        a redelivered execution of the same id elsewhere keeps its lease.
        Returns the number of slots (or queue places) released.
        """
        name = self.redislock_name(args, kwargs)
        lease_set = self.redislock_leaseset(name)
        prefix = owner_prefix(task_id, pid)
        owners = [h.owner for h in lease_set.holders() if h.owner.startswith(prefix)]
        owners += [w.owner for w in lease_set.waiters() if w.owner.startswith(prefix)]
        released = 0
        for owner in owners:
            held = lease_set.release_owner(owner)
            released += 1
            log.warning(
                "%s[%s]: released %r held by its dead process %d (%s)",
                self.name,
                task_id,
                name,
                pid,
                reason,
            )
            signals.lock_released.send(
                sender=self, task_id=task_id, name=name, token=None, kind=self._redislock_kind,
                reason=reason, held=held,
            )  # fmt: skip
        if headers.get(HEADER_DEDUPE):
            self.redislock_clear_marker(task_id, args, kwargs)
        return released


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

    Default contention policy: ``retry``.  ``semaphore_ttl`` is an alias of
    ``lock_ttl`` (it wins when both are set).
    """

    semaphore_key: Any = None
    semaphore_limit: int | None = None
    semaphore_ttl: float | None = None
    lock_policy = "retry"
    _redislock_kind = "semaphore"
    _redislock_key_option = "semaphore_key"

    @classmethod
    def _redislock_ttl_option(cls) -> float | None:
        return cls.semaphore_ttl if cls.semaphore_ttl is not None else cls.lock_ttl

    @classmethod
    def _redislock_limit(cls) -> int:
        limit = cls.semaphore_limit
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"semaphore_limit must be an int >= 1, got {limit!r}")
        if limit < 1:
            raise ValueError(f"semaphore_limit must be >= 1, got {limit}")
        return limit
