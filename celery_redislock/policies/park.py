"""``park``: a contended task waits in Redis, in its name's FIFO park list.

No worker process blocks, no message bounces through the broker: the task
is stored at enqueue (or on arrival, when it came another way) and published
again when a slot frees.  The Redis side is :mod:`celery_redislock.core.park`,
the Celery side (capture, arrival, promotion, sweeper, admin) the package
:mod:`celery_redislock.parking`; docs/park.md has the state machine and the
guarantees.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from functools import partial
from typing import Any, NoReturn

from ..parking.arrival import claim_or_arrive, make_way, wait_for_a_limit
from ..parking.enqueue import NO_CHANGES, park_or_publish
from ..parking.promotion import after_release, release_and_promote
from .base import Context, Policy, fail, take

__all__ = ["Park"]


class Park(Policy):
    """Parks a task whose name is full; a release promotes the next one.

    Under eager execution there is no broker to park for, so it waits like
    ``wait``.  A call with a ``countdown`` / ``eta`` is published as it is
    and decided when it arrives.
    """

    name = "park"
    waits_when_eager = True

    def acquire(self, ctx: Context) -> bool:
        if ctx.request.is_eager:
            return take(ctx, blocking=True)
        task, request, args, kwargs = ctx.task, ctx.request, ctx.args, ctx.kwargs
        lease_set = ctx.need_lease_set()
        # Holds the lease, or raises Ignore (parked, or a stale copy).
        claim_or_arrive(task, request, args, kwargs, lease_set, self.park_settings(task))
        return True

    def refused_by_listed(self, ctx: Context) -> None:
        """Back to the head of its park, holding nothing, until the listed
        limit has room (:func:`~celery_redislock.parking.arrival.wait_for_a_limit`;
        under ``keep_latest`` as the key's pending call, which a newer call
        replaces).  Eager runs have no park: they waited already
        (``waits_when_eager``), and end as a contended eager run does."""
        if ctx.request.is_eager:
            super().refused_by_listed(ctx)
            return
        raise wait_for_a_limit(ctx, replaceable=self.coalesces)

    def contended(self, ctx: Context) -> NoReturn:
        fail(ctx, self.name, f"{ctx.refusal} {ctx.waited} (policy park, eager)")

    def publish(self, ctx: Context) -> Any:
        task, send = ctx.task, ctx.need_send()
        if task.app.conf.task_always_eager or _delayed(ctx.call):
            return send()
        name, task_id = ctx.name, ctx.task_id
        limit = task.redislock_limit(ctx.args, ctx.kwargs)
        rate = task.redislock_rate(ctx.args, ctx.kwargs)
        return park_or_publish(task, name, task_id, limit, send, rate, self.park_settings(task))

    def park_settings(self, task: Any) -> Mapping[str, Any]:
        """Changes to the app's ``ParkConfig`` for a call of ``task`` (none here;
        ``keep_latest`` sets its own)."""
        return NO_CHANGES

    def release(self, ctx: Context) -> None:
        """A release that promotes the name's next tasks in the same call.
        When the run gave a slot of a listed limit that every run of the task
        needs (its key does not depend on the call's arguments) to a name
        that waited for it (``ctx.woke``), the release holds the name's
        parked work for that limit instead, and the name is noted behind the
        names it woke (:func:`~celery_redislock.parking.arrival.make_way`):
        its next task would only be sent back by that limit.  A templated
        limit (``"region:{region}"``) is left out: the next task may not need it."""
        task, lease_set, limit = ctx.task, ctx.need_lease_set(), ctx.need_limit()
        for held, published, handed_at in ctx.woke:
            if held.name in task._redislock_listed_fixed:  # the next run needs it too
                note_behind = partial(
                    make_way,
                    task,
                    ctx.task_id,
                    lease_set,
                    held.name,
                    held.limit,
                    published,
                    handed_at,
                )
                release_and_promote(task, lease_set, limit, held.name, note_behind)
                return
        release_and_promote(task, lease_set, limit)

    def after_release(self, ctx: Context) -> None:
        task, name, limit = ctx.task, ctx.name, ctx.need_limit()
        after_release(task, name, limit)


def _delayed(call: Mapping[str, Any]) -> bool:
    """Whether the call has a ``countdown`` / ``eta``: published as is, decided at arrival."""
    countdown, eta = call.get("countdown"), call.get("eta")
    if isinstance(countdown, (int, float)) and countdown > 0:
        return True
    return isinstance(eta, (datetime.datetime, str))
