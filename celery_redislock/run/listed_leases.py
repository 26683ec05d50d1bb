"""The leases a run holds on its listed limits (``limits=``, see
:mod:`celery_redislock.enqueue.listed_limits`).

How a run takes them (:func:`take_all`): once its own key is held, one try
per listed limit, in the order of their names, each with its rate if it has
one (one script call each: the names may sit in different cluster slots).
The first one that refuses ends the try: every listed lease taken so far is
given back at once, and the caller gives its own lease back and hands the
run to its policy, naming the limit that refused.  So a run holds all of
its limits or none, and never *waits* while holding one: a refused run
holds nothing (``park`` parks it, ``wait`` looks again a little later in
its process, the others give it up).

Guaranteed: no listed name ever has more holders than its limit (each is a
:class:`~celery_redislock.FairSemaphore` slot, with its invariant); a body
runs only while its run holds its own key and every listed limit; each
listed lease is renewed by the process heartbeat (and by the worker's main
process, run/request.py), stated for the dead-holder path, and given back
on every path the own lease is (``run/release.py`` ``release_after_run``
at the end of the run and before a retry; ``release_dead_child`` there
when the child died).
Not guaranteed: FIFO between runs that compete for a listed limit (but
between the keys ``park`` notes as waiting for it: docs/park.md), nor that
a short-lived overlap of tries cannot refuse two runs that would each have
fit alone (both give back, both are refused: no limit is exceeded).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.leaseset import LeaseSet
from ..core.semaphore import FairSemaphore
from ..enqueue.listed_limits import Need
from ..parking.promotion import wake_waiting_for
from ..policies.base import Context, give_back, take
from ..settings import client_for

__all__ = [
    "lease_set_of",
    "needs_of",
    "renewal_names",
    "take_all",
]


def needs_of(task: Any, name: str, args: Any, kwargs: Any) -> list[Need]:
    """What a run with these arguments needs of the task's listed limits, in
    the order they are taken; a ``ValueError`` when one names ``name`` (the
    run's own key) or two name the same."""
    needs = sorted(
        (listed.need(args or (), kwargs or {}) for listed in type(task)._redislock_listed),
        key=lambda need: need.name,
    )
    names = [need.name for need in needs]
    for i, need in enumerate(needs):
        if need.name == name or need.name in names[:i]:
            raise ValueError(
                f"task {task.name}: a listed limit names {need.name!r}, which "
                f"{'is the own key' if need.name == name else 'another listed limit names'} "
                "of this call: each name is one semaphore, taken once"
            )
    return needs


def lease_set_of(
    task: Any,
    need: Need,
    *,
    ttl: float | None = None,
    owner_prefix: str = "",
    on_lost: Any = None,
    task_id: str | None = None,
) -> LeaseSet:
    """The lease set of one listed limit, on the app's lock Redis: a
    :class:`~celery_redislock.FairSemaphore` of ``need.limit`` slots whose
    holders say which task holds them (``celery redislock status``)."""
    client, settings = client_for(task.app)
    meta: dict[str, Any] = {"task": task.name, "limit": need.limit, "listed": True}
    if task_id is not None:
        meta["task_id"] = task_id
    return FairSemaphore(
        client,
        need.name,
        need.limit,
        ttl=ttl or settings.default_ttl,
        prefix=settings.prefix,
        owner_prefix=owner_prefix,
        on_lost=on_lost,
        meta=meta,
        index=True,
    )


def take_all(
    ctx: Context, needs: Sequence[Need], on_lost: Any
) -> tuple[list[LeaseSet], Context | None]:
    """Take a slot of every listed limit for this run (``ctx``: its run
    context, its own lease held; ``on_lost``: the callback of a lost lease).
    Returns the held lease sets and None, or
    nothing held and the context of the limit that refused (its ``name``,
    and its ``rate_wait`` when its rate refused)."""
    own = ctx.need_lease_set()
    held: list[LeaseSet] = []
    for need in needs:
        lease_set = lease_set_of(
            ctx.task,
            need,
            ttl=own.ttl,
            owner_prefix=own.owner_prefix,
            on_lost=on_lost,
            task_id=ctx.task_id,
        )
        attempt = Context(
            phase="run",
            task=ctx.task,
            name=need.name,
            task_id=ctx.task_id,
            args=ctx.args,
            kwargs=ctx.kwargs,
            limit=need.limit,
            request=ctx.request,
            lease_set=lease_set,
            rate=need.rate,
        )
        try:
            taken = take(attempt, blocking=False)
        except BaseException:
            _give_back_and_wake(ctx.task, held, ctx.name)
            raise
        if not taken:
            _give_back_and_wake(ctx.task, held, ctx.name)
            return [], attempt
        held.append(lease_set)
    return held, None


def _give_back_and_wake(task: Any, held: Sequence[LeaseSet], own: str) -> None:
    """Give back the listed leases a refused run took, and wake a name whose
    parked head waits for each (a slot came back, as after any release),
    but the run's own name ``own``: its run goes back to wait for the limit
    that refused it, and its next task would only jump ahead of it."""
    give_back(held)
    for lease_set in held:
        wake_waiting_for(task.app, lease_set.name, passed_over=own)


def renewal_names(task: Any, args: Any, kwargs: Any) -> list[str]:
    """The listed names a run with these arguments holds (for the main
    process's renewal); a name that cannot be built is left out."""
    names = []
    for listed in type(task)._redislock_listed:
        try:
            names.append(listed.keys.build(args or (), kwargs or {}))
        except Exception:
            continue
    return names
