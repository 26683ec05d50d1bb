"""Giving a guarded task's lease back: at the end of a run, and for a dead child.

:func:`release_run` is called by the task itself when its body returns or
raises, and before ``self.retry`` publishes the retry.  :func:`release_dead_child`
is called by the worker's main process (see :mod:`celery_redislock.run.request`)
once the pool child that ran the task has died: it releases only the owners
with that task id, this host and that pid, so a redelivered execution of the
same id elsewhere keeps its lease.  Both send ``lock_released``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from .. import signals
from ..core.errors import LockLost, NotOwned
from ..core.leaseset import LeaseSet
from ..core.owners import execution_prefix
from ..core.rate import NO_RATE
from ..enqueue import dedupe
from ..enqueue.listed_limits import Need
from ..enqueue.options import HEADER_POLICY
from ..parking.promotion import release_listed, wake_waiting_for
from ..policies import POLICIES, Context, check_policy
from . import listed_leases

__all__ = ["lost_signal", "release_after_run", "release_dead_child", "release_run"]

log = logging.getLogger("celery_redislock")


def lost_signal(task: Any, task_id: str, listed: bool = False) -> Callable[[Any], None]:
    """An ``on_lost`` callback sending ``lock_lost`` for this run (heartbeat
    thread); ``listed``: for the leases of its listed limits (``kind``
    ``"semaphore"``, not the task's)."""

    def on_lost(lease: Any) -> None:
        _send_lost(task, task_id, lease.name, lease.token, lease.lost_reason, listed)

    return on_lost


def _send_lost(
    task: Any, task_id: str, name: str, token: int, reason: str | None, listed: bool
) -> None:
    signals.lock_lost.send(
        sender=task,
        task_id=task_id,
        name=name,
        token=token,
        kind="semaphore" if listed else task._redislock_kind,
        reason=reason,
        listed=listed,
    )


def release_run(
    task: Any,
    task_id: str,
    lease_set: LeaseSet,
    reason: str,
    give_back: Callable[[], None],
    listed: bool = False,
) -> None:
    """Release what this run holds (nothing if released already) by
    ``give_back()``, which raises as ``LeaseSet.release`` does; never raises
    a Redis error.  ``listed``: the lease of a listed limit (the signal's
    ``kind`` is then ``"semaphore"``, not the task's).

    A lease that was lost meanwhile is logged, and ``lock_lost`` is sent
    for it now (reason ``gone at release``) if the heartbeat did not find it
    first: a body that kept the heartbeat from running (one long C call
    holding the GIL, in a threads or solo pool).  One that cannot be
    released (Redis unreachable) is logged and frees within its TTL, since
    the heartbeat no longer renews it.
    """
    token = lease_set.token
    if token is None:
        return  # released already (by retry())
    held = True
    try:
        give_back()
    except LockLost as lost:
        held = False
        if not lost.reported:
            reason = "gone at release: expired, deleted, or Redis lost its data"
            _send_lost(task, task_id, lease_set.name, token, reason, listed)
        log.warning(
            "%s[%s]: lease on %r (fencing token %s) was lost before release",
            task.name,
            task_id,
            lease_set.name,
            token,
        )
    except NotOwned:
        return
    except RedisError as exc:
        log.error(
            "%s[%s]: could not release %r (%r); it expires within its ttl",
            task.name,
            task_id,
            lease_set.name,
            exc,
        )
        held = False
    signals.lock_released.send(
        sender=task,
        task_id=task_id,
        name=lease_set.name,
        token=token,
        kind="semaphore" if listed else task._redislock_kind,
        reason=reason,
        held=held,
        listed=listed,
    )


def release_after_run(task: Any, request: Any, lease_set: LeaseSet, reason: str) -> None:
    """Give back what a run holds when its body returned, raised or retried
    (nothing if released already), through the run's policy
    (:meth:`~celery_redislock.policies.Policy.release`: ``park`` promotes in
    the same script, the others release plainly).  The name's limit is taken now, so
    a raised (callable) limit fills the new slots.  First the leases of the
    run's listed limits (``limits=``), each with its own ``lock_released``
    (before the own one: a run of the same key that takes the freed own
    slot finds them free too)."""
    # listed limits whose slot went to a name that waited, with the tasks
    # published and the Redis time of the hand-off
    woke: list[tuple[LeaseSet, int, int]] = []
    try:
        for held in getattr(request, "redislock_listed", None) or ():
            if held.token is not None:
                woken: list[Any] = []
                handed_at: list[int] = []
                give_back = partial(release_listed, held, woken, handed_at)
                release_run(task, request.id, held, reason, give_back, listed=True)
                published = wake_waiting_for(task.app, held.name, woken=woken) if woken else 0
                if published:
                    woke.append((held, published, handed_at[0] if handed_at else 0))
    finally:
        if lease_set.token is not None:  # else released already (by retry())
            _release_own(task, request, lease_set, reason, woke)


def _release_own(
    task: Any,
    request: Any,
    lease_set: LeaseSet,
    reason: str,
    woke: list[tuple[LeaseSet, int, int]],
) -> None:
    try:
        limit = task.redislock_limit(request.args, request.kwargs)
    except Exception:
        limit = lease_set.limit
    policy = request.redislock_policy
    ctx = Context(
        phase="release",
        task=task,
        name=lease_set.name,
        task_id=str(request.id),
        args=request.args,
        kwargs=request.kwargs,
        limit=limit,
        request=request,
        lease_set=lease_set,
        woke=tuple(woke),
    )
    release_run(task, request.id, lease_set, reason, partial(policy.release, ctx))


def release_dead_child(
    task: Any,
    task_id: str,
    pid: int,
    args: Any,
    kwargs: Any,
    headers: Mapping[str, Any],
    reason: str,
) -> int:
    """Release what the execution of ``task_id`` in process ``pid`` held.

    Returns the number of slots (or queue places) released, its listed
    limits' included (those first: a failure on the own name cannot keep them).
    """
    released = _release_dead_listed(task, task_id, pid, args, kwargs, reason)
    name = task.redislock_name(args, kwargs)
    prefix = execution_prefix(task_id, pid)
    # Reading holders does not depend on the limit; releasing does.
    mine = [
        h for h in task.redislock_leaseset(name, limit=1).holders() if h.owner.startswith(prefix)
    ]
    lease_set = task.redislock_leaseset(
        name, limit=_limit_of_dead_run(task, task_id, args, kwargs, mine)
    )
    owners = [h.owner for h in mine]
    places = [w.owner for w in lease_set.waiters() if w.owner.startswith(prefix)]
    _release_dead_owners(task, task_id, pid, lease_set, owners, reason)
    for place in places:  # it never held the key: no lock_released
        lease_set.release_owner(place)
        log.info(
            "%s[%s]: gave up the place in the queue of %r of its dead process %d (%s)",
            task.name,
            task_id,
            name,
            pid,
            reason,
        )
    owners += places
    if headers.get(dedupe.HEADER):
        dedupe.clear_for(task, task_id, args, kwargs)
    if owners:
        policy = headers.get(HEADER_POLICY) or task.lock_policy
        ctx = Context(
            phase="release",
            task=task,
            name=name,
            task_id=task_id,
            args=args,
            kwargs=kwargs,
            limit=lease_set.limit,
            lease_set=lease_set,
        )
        POLICIES[check_policy(policy)].after_release(ctx)
    return len(owners) + released


def _release_dead_listed(
    task: Any, task_id: str, pid: int, args: Any, kwargs: Any, reason: str
) -> int:
    """Release what the execution of ``task_id`` in the dead process ``pid``
    held of its listed limits, and wake a name waiting for each; returns how
    many slots it released.  A name that fails is left to its ttl."""
    prefix = execution_prefix(task_id, pid)
    released = 0
    for name in listed_leases.renewal_names(task, args, kwargs):
        reader = listed_leases.lease_set_of(task, Need(name, 1, NO_RATE))
        try:
            owners = [h.owner for h in reader.holders() if h.owner.startswith(prefix)]
            released += _release_dead_owners(
                task, task_id, pid, reader, owners, reason, listed=True
            )
            if owners:
                wake_waiting_for(task.app, name)
        except (RedisError, RedisClusterException) as exc:
            log.error(
                "%s[%s]: could not release %r of its dead process %d (%r); it expires "
                "within its ttl",
                task.name,
                task_id,
                name,
                pid,
                exc,
            )
    return released


def _release_dead_owners(
    task: Any,
    task_id: str,
    pid: int,
    lease_set: LeaseSet,
    owners: list[str],
    reason: str,
    listed: bool = False,
) -> int:
    """Release each of ``owners`` (of the dead process ``pid``) from
    ``lease_set``, with a log line and ``lock_released`` each; returns how many."""
    for owner in owners:
        held = lease_set.release_owner(owner)
        log.warning(
            "%s[%s]: released %r held by its dead process %d (%s)",
            task.name,
            task_id,
            lease_set.name,
            pid,
            reason,
        )
        signals.lock_released.send(
            sender=task,
            task_id=task_id,
            name=lease_set.name,
            token=None,
            kind="semaphore" if listed else task._redislock_kind,
            reason=reason,
            held=held,
            listed=listed,
        )
    return len(owners)


def _limit_of_dead_run(task: Any, task_id: str, args: Any, kwargs: Any, mine: list[Any]) -> int:
    """The limit the dead run held its slot with: its holder meta, else asked again.

    A callable limit may answer differently now, or fail; the clean-up must
    release anyway (falling back to 1).
    """
    for holder in mine:
        recorded = holder.meta.get("limit")
        if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 1:
            return recorded
    try:
        return int(task.redislock_limit(args, kwargs))
    except Exception as exc:  # the user's callable: anything
        log.error(
            "%s[%s]: semaphore_limit failed during clean-up (%r); releasing with limit 1",
            task.name,
            task_id,
            exc,
        )
        return 1
