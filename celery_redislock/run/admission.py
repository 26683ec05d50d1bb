"""How one run of a guarded task gets its lease before the body runs.

The lock name and the limit are computed from the call's arguments (a
callable limit per run), the lease set is built with an owner prefix naming
this task id and process, and the run's policy (per-call header, else the
task's ``lock_policy``) asks for the slot.  Fail closed: a Redis error is
logged in one line naming the URL and setting, and re-raised; the body
never runs without the lease.  A refused run is handed to the policy's
``contended``, which ends it visibly.

Whatever the policy, a run first makes way for an earlier delivery of its
own task id that still holds the name (:func:`defer_to_earlier_delivery`).
"""

from __future__ import annotations

import logging
import os
import random
import time
from typing import Any, NoReturn

from celery.exceptions import Ignore
from celery.states import READY_STATES
from redis.exceptions import RedisClusterException, RedisError

from .. import signals
from ..core.leaseset import LeaseSet
from ..core.owners import execution_prefix, execution_tag
from ..core.park import Parking
from ..diagnose import fail_closed, settings_failed
from ..enqueue import options
from ..enqueue.listed_limits import Need
from ..parking.arrival import CLAIM_FAILED
from ..parking.states import StillPending
from ..policies import (
    POLICIES,
    Context,
    announce_contended,
    check_call,
    check_policy,
    requeue,
)
from ..policies.base import Policy, give_back
from ..settings import client_for
from . import listed_leases
from .release import lost_signal

__all__ = ["defer_to_earlier_delivery", "enter"]

log = logging.getLogger("celery_redislock")


def enter(task: Any, request: Any, args: Any, kwargs: Any) -> LeaseSet:
    """The held lease set of this run, or an exception that ends the run
    (the policy's, or the Redis error)."""
    name = task.redislock_name(args, kwargs)
    policy = POLICIES[
        check_policy(options.header(request, options.HEADER_POLICY) or task.lock_policy)
    ]
    ttl, wait_timeout = options.run_options(request, task.lock_wait_timeout)
    limit = task.redislock_limit(args, kwargs)  # per run, before any Redis call
    rate = task.redislock_rate(args, kwargs)
    policy.check_rate(task.name, rate.rate)  # a per-call lock_policy
    check_call(task, policy)
    needs = listed_leases.needs_of(task, name, args, kwargs)
    on_lost = lost_signal(task, request.id)
    try:
        client_for(task.app)  # settings read once per process: a mistake ends here
    except (TypeError, ValueError) as exc:
        log.error("%s", settings_failed(task.name, request.id, name, exc))
        if options.header(request, options.HEADER_PARK_TOKEN) is not None:
            # A promoted copy: its reservation stays in Redis, and the park
            # publishes the task again after its deadline (a worker whose
            # settings work runs it then), so a FAILURE now would be followed
            # by the task's run.
            log.error(
                "%s[%s]: no state stored; the park publishes it again after "
                "redislock_park_deadline",
                task.name,
                request.id,
            )
            raise StillPending() from exc
        raise
    except (RedisError, RedisClusterException) as exc:  # a Cluster client connects when built
        log.error("%s", fail_closed(task.app, task.name, request.id, name, exc))
        raise
    ctx: Context | None = None
    try:
        lease_set: LeaseSet = task.redislock_leaseset(
            name,
            ttl=ttl,
            limit=limit,
            owner_prefix=execution_prefix(request.id, os.getpid()),
            on_lost=on_lost,
            task_id=request.id,
        )
        ctx = Context(
            phase="run",
            task=task,
            name=name,
            task_id=str(request.id),
            args=args,
            kwargs=kwargs,
            limit=limit,
            request=request,
            lease_set=lease_set,
            wait_timeout=wait_timeout,
            rate=rate,
        )
        request.redislock_policy = policy
        request.redislock_listed = []
        try:
            defer_to_earlier_delivery(ctx)
        except (RedisError, RedisClusterException) as exc:
            if options.header(request, options.HEADER_PARK_TOKEN) is not None:
                setattr(exc, CLAIM_FAILED, True)  # a promoted copy: as its claim's
            raise
        started = time.monotonic()
        acquired = policy.acquire(ctx)
        if acquired and needs:
            listed_lost = lost_signal(task, request.id, listed=True)
            acquired = _take_listed(ctx, needs, listed_lost)
            if not acquired and policy.waits_for_listed(ctx):
                acquired = _wait_for_listed(ctx, policy, needs, listed_lost, started)
    except (RedisError, RedisClusterException) as exc:
        log.error("%s", fail_closed(task.app, task.name, request.id, name, exc))
        if getattr(exc, CLAIM_FAILED, False) and ctx is not None:
            _claim_again_later(ctx, exc)
        raise
    if acquired:
        waited = time.monotonic() - started
        for held in [lease_set, *request.redislock_listed]:
            signals.lock_acquired.send(
                sender=task,
                task_id=request.id,
                name=held.name,
                token=held.token,
                kind=task._redislock_kind if held is lease_set else "semaphore",
                waited=waited,
                listed=held is not lease_set,
            )
        return lease_set
    if ctx.refused_by is not None:  # its own lease is held: no earlier delivery has it
        announce_contended(ctx, policy.name)
        try:
            policy.refused_by_listed(ctx)
        except (RedisError, RedisClusterException) as exc:
            log.error("%s", fail_closed(task.app, task.name, request.id, name, exc))
            raise
        policy.contended(ctx)
    defer_to_earlier_delivery(ctx, contended=True)
    announce_contended(ctx, policy.name)
    policy.contended(ctx)


#: how often a promoted copy whose claim failed on a Redis error is published
#: again to claim its reservation
CLAIM_RETRIES = 120


def _claim_again_later(ctx: Context, exc: BaseException) -> NoReturn:
    """A promoted copy (``park``) whose claim failed on a Redis error: its
    reservation is still in Redis (the claim did not run), or the claim ran
    and its reply was lost.  Rather than end ``FAILURE``, which the task's
    later run would contradict, the copy is published again with its token
    (uncounted, no state stored; header ``redislock_claim_retry``): back, it
    claims the reservation if it is still there, is dropped as stale if the
    park published the task again meanwhile, or, its own claim having gone
    through, is admitted as the task (the lease that claim left lapses by
    its ttl).  At most :data:`CLAIM_RETRIES` times, every
    ``max(lock_retry_countdown, 1)`` seconds plus the socket timeout while
    Redis does not answer; after them, or when that publish fails too (the
    broker is that Redis), the run ends with no state stored: the park
    publishes the task again after its deadline (if that claim never ran)."""
    tries = int(options.header(ctx.request, options.HEADER_CLAIM_RETRY) or 0) + 1
    if tries <= CLAIM_RETRIES:
        log.warning(
            "%s[%s]: its claim of a park reservation failed; the message is published "
            "again to claim it once Redis answers (try %d of %d)",
            ctx.task.name,
            ctx.task_id,
            tries,
            CLAIM_RETRIES,
        )
        try:
            marks = {options.HEADER_CLAIM_RETRY: tries}
            requeue(ctx, max(ctx.task.lock_retry_countdown, 1.0), deferred=True, marks=marks)
        except StillPending:
            raise
        except Exception as publish_error:
            log.error(
                "%s[%s]: could not publish it again (%r)",
                ctx.task.name,
                ctx.task_id,
                publish_error,
            )
    log.error(
        "%s[%s]: its claim is left to the park, which publishes the task again after "
        "redislock_park_deadline if that claim never reached Redis",
        ctx.task.name,
        ctx.task_id,
    )
    raise StillPending() from exc


def _take_listed(ctx: Context, needs: list[Need], on_lost: Any) -> bool:
    """With the own lease held: take every listed limit too (the run's
    ``redislock_listed``), or say which refused (``ctx.refused_by``,
    ``ctx.rate_wait``; the own lease is still held: the policy's
    ``refused_by_listed`` gives it back)."""
    try:
        held, refusal = listed_leases.take_all(ctx, needs, on_lost)
    except BaseException:  # a Redis error midway: the run ends holding nothing
        give_back([ctx.need_lease_set()])
        raise
    if refusal is None:
        ctx.request.redislock_listed = held
        return True
    ctx.refused_by, ctx.refused_limit = refusal.name, refusal.limit
    ctx.rate_wait = refusal.rate_wait
    return False


def _wait_for_listed(
    ctx: Context, policy: Policy, needs: list[Need], on_lost: Any, started: float
) -> bool:
    """A run refused by a listed limit whose policy waits for it here
    (``wait``; an eager ``park`` or ``retry``, with no broker to come back
    through): give everything back, wait a little (:data:`LISTED_POLL`, or
    the refusing rate's wait), take the own slot and the listed limits
    again, until ``wait_timeout``.
    False: refused still, own lease held and ``ctx.refused_by`` set, or (its
    own slot refused) nothing held and ``ctx.refused_by`` None."""
    timeout = ctx.wait_timeout
    deadline = None if timeout is None else started + timeout
    try:
        while True:
            pause = ctx.rate_wait if ctx.rate_wait is not None else LISTED_POLL
            if deadline is not None and time.monotonic() + pause > deadline:
                return False
            give_back([ctx.need_lease_set()])
            time.sleep(pause)
            ctx.refused_by = ctx.refused_limit = ctx.rate_wait = None
            if deadline is not None:  # the own slot's wait counts against the same timeout
                ctx.wait_timeout = max(deadline - time.monotonic(), 0.0)
            if not policy.acquire(ctx):
                return False
            if _take_listed(ctx, needs, on_lost):
                return True
    finally:
        ctx.wait_timeout = timeout


#: how often a run waiting in its process for a full listed limit looks
#: again (seconds)
LISTED_POLL = 0.05


def defer_to_earlier_delivery(ctx: Context, contended: bool = False) -> None:
    """Requeue (uncounted) if an earlier delivery of this task id still holds the name.

    Run phase, for every policy.  That is a redelivery after
    ``visibility_timeout``, or the run after a ``retry(throw=False)``: running
    alongside the earlier one, or waiting on it, would be wrong.  Before
    acquiring, only re-runs (marked redelivered, ``retries > 0``, or a copy
    this library requeued, which carries its requeue count: a requeue made
    here drops the redelivered mark, and the copy must look again) look;
    after a refused acquisition (``contended``) every run looks, since a copy
    can carry no redelivered mark: one published again with the same task id
    by a producer or by hand (RabbitMQ and every kombu Redis transport from
    5.3 on do mark their own redeliveries).

    An earlier delivery still *waiting* for the name (policy ``wait``) is
    made way for too: a copy queued behind it would run it again after it.

    A copy whose park promotion token is stale (superseded: its task runs from
    the park, e.g. a run that went back there with ``redislock_pause``) is
    dropped instead: that copy never runs.

    A promoted copy whose reservation no copy claimed yet (a message a
    stopped worker had fetched, given back by the broker marked
    redelivered) is the task's first run: it goes on to its claim.  A Redis
    error here, for a promoted copy, is handled as its claim's would be
    (:func:`_claim_again_later`).

    Any other copy (marked redelivered, or one that made way before) that
    finds no earlier delivery left asks the result backend whether one ended
    (``SUCCESS``, ``FAILURE``, ``REVOKED``): then it is dropped, as Celery's
    ``worker_deduplicate_successful_tasks`` drops a redelivered message, else
    each run longer than ``visibility_timeout`` would leave a copy to run
    after it, for ever.  A state that is not final may be a delivery that
    released its lease and is storing its result, or one that died: the
    copy looks once more, a second later, and then runs (at least once).
    Without a persistent result backend (none, ``rpc``, ``ignore_result``)
    it cannot tell, and runs.

    When it defers, it sends ``lock_contended(policy="redelivered")`` and
    raises :class:`~celery_redislock.parking.StillPending` (see
    :func:`~celery_redislock.policies.requeue`; no state is stored: the
    task's state is its earlier delivery's); when it drops, it logs and
    raises ``Ignore``; otherwise it returns.
    """
    task, request = ctx.task, ctx.request
    redelivered = (request.delivery_info or {}).get("redelivered")
    rerun = (  # a copy that made way carries a requeue count too (requeue())
        request.retries
        or redelivered
        or options.header(request, options.HEADER_REQUEUES) is not None
    )
    if not (rerun or contended):
        return
    deferred = options.header(request, options.HEADER_DEFERRED) is not None
    tag = execution_tag(request.id)
    holders, waiters = ctx.need_lease_set().holders_and_waiters()
    mine = [h.expires_in for h in holders if h.owner.startswith(tag)]
    if rerun and not mine and any(w.owner.startswith(tag) for w in waiters):
        mine = [max(task.lock_retry_countdown, 0.5)]
    if mine:
        _drop_if_stale(ctx)
        _defer(ctx, min(max(mine), max(task.lock_retry_countdown, 0.5)))
    if redelivered or deferred:
        where, fate = _where_in_park(ctx)
        if where == "inflight" or fate == "stale":
            # A promotion no copy claimed: its claim runs this copy, or drops
            # it; a twin that claims first makes this one a duplicate.
            request.redislock_claim_first = where == "inflight"
            return
        not_ended = _drop_if_ended(ctx)  # raises Ignore when it ended
        if not_ended and not deferred:
            _defer(ctx, 1.0)  # storing its result, or dead: look once more


def _defer(ctx: Context, delay: float) -> NoReturn:
    announce_contended(ctx, "redelivered")
    requeue(ctx, delay + random.uniform(0, ctx.task.lock_retry_jitter), deferred=True)


def _drop_if_ended(ctx: Context) -> bool:
    """Raise ``Ignore`` (acknowledged, nothing stored) if the result backend
    says a delivery of this task id ended (its state is final); else return
    whether it said the task has not ended (False: no persistent backend, or
    it could not answer)."""
    task = ctx.task
    backend = task.backend
    if task.ignore_result or not getattr(backend, "persistent", False):
        return False
    try:
        state = backend.get_state(ctx.task_id)
    except Exception as exc:  # a backend that cannot answer: run, at least once
        log.warning(
            "%s[%s]: the result backend could not say whether an earlier delivery "
            "ended (%s); this copy runs",
            task.name,
            ctx.task_id,
            exc,
        )
        return False
    if state in READY_STATES:
        log.info(
            "%s[%s] dropped: a copy of a delivery that ran to its end (state %s)",
            task.name,
            ctx.task_id,
            state,
        )
        raise Ignore()
    return True


def _drop_if_stale(ctx: Context) -> None:
    """Raise ``StillPending`` (acknowledged, nothing stored) if this copy carries
    a park promotion token that is stale: the task runs from its park."""
    if _where_in_park(ctx)[1] == "stale":
        log.info(
            "%s[%s] dropped: a stale copy (token %s); the task runs from its park",
            ctx.task.name,
            ctx.task_id,
            options.header(ctx.request, options.HEADER_PARK_TOKEN),
        )
        raise StillPending()


def _where_in_park(ctx: Context) -> tuple[str, str]:
    """Where the task is in its park and the fate of this copy's promotion
    token (``Parking.where``; ``("", "")`` for a copy without one).
    ``"inflight"``: a promotion no copy claimed yet, a reservation that waits
    for this copy (a message a stopped worker had fetched, which the broker
    gave back)."""
    token = options.header(ctx.request, options.HEADER_PARK_TOKEN)
    if token is None:
        return "", ""
    lease_set = ctx.need_lease_set()
    parking = Parking(lease_set.client, lease_set.keys.prefix, lease_set.name)
    return parking.where(ctx.task_id, str(token))
