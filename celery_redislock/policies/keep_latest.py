"""``keep_latest``: while a run holds the key, the newest call waits as the key's
one pending run and replaces the call that waited before it.

Built on the park (docs/park.md): a contended call is stored in its key's park
as with ``park``, but a call that parks takes the place of the one parked
before it, in the same script call.  The replaced task ends ``SUPERSEDED``
(``AsyncResult.info["superseded_by"]``: the id of the call that took its
place), with a log line and ``lock_dropped(reason="superseded")``.  So a key
has at most its running runs and one pending run, and the pending one has the
newest arguments.

With ``lock_debounce=S`` every call parks, even on a free key, and is
promoted no sooner than S seconds after the newest call of its key, and (with
``lock_debounce_max=M``) no later than M seconds after the first call of the
burst, once a slot is free: calls within S of each other coalesce into one
run with the last call's arguments.

A run's own retry (``self.retry``) keeps its place: its message is stored
ahead of the key's park instead of being published, and the key is paused
for the retry's countdown, so the pending call starts after the run's
retries, and an older retry never takes the place of a newer call.  A newer
call parks behind the retry (with ``lock_supersede`` it takes the retry out:
the retry ends ``SUPERSEDED``).

With ``limits=`` a run a listed limit refuses goes back to the park as the
key's pending call, replaceable like any (docs/limits-and-eager.md).

Guaranteed: every call is followed by a run of its key that *started after
the call was made* (its own, or a newer call's that took its place), unless
that newer call is revoked or expires.  A promoted run (its message already
published) is not replaced: a newer call parks behind it.  Under eager
execution there is no park: every call runs, one after the other (``wait``),
debounced or not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..core.validation import check_ttl
from ..enqueue.options import HEADER_PARK_TOKEN, header
from ..parking.enqueue import retry_at_head
from ..parking.message import copy_token
from .base import Context, Policy
from .park import Park

__all__ = ["KeepLatest"]


class KeepLatest(Park):
    """Parks a contended task as its key's single pending run (see the module docstring)."""

    name = "keep_latest"
    retry_keeps_its_turn = True
    options = (
        "lock_supersede",
        "lock_throttle",
        "lock_throttle_trailing",
        "lock_debounce",
        "lock_debounce_max",
    )
    coalesces = True

    def check_options(self, task: Any) -> None:
        _check_debounce(task)
        _check_throttle(task)
        _check_supersede(task)

    def check_other_policy(self, task: Any, policy: Policy) -> None:
        """Debounce and supersede exist only in this policy's park: a call of
        another policy would run without them (a throttle is a rate, which
        the other policy keeps or refuses, see :meth:`Policy.check_rate`)."""
        coalescing = [o for o in ("lock_debounce", "lock_supersede") if getattr(task, o)]
        if coalescing:
            raise ValueError(
                f"task {task.name}: lock_policy={policy.name!r} per call would run it "
                f"without its {' and '.join(coalescing)} (they need lock_policy="
                f"{self.name!r})"
            )

    def park_settings(self, task: Any) -> Mapping[str, Any]:
        return {
            "keep_latest": True,
            "debounce": float(task.lock_debounce or 0),
            "debounce_max": float(task.lock_debounce_max or 0),
            "supersede": bool(task.lock_supersede),
        }

    def publish(self, ctx: Context) -> Any:
        task, request = ctx.task, ctx.task.request
        lease_set = getattr(request, "redislock", None)
        own_retry = (
            request.id == ctx.task_id
            and lease_set is not None
            and lease_set.name == ctx.name
            and getattr(request, "redislock_policy", None) is self
            and not request.is_eager
            and not task.app.conf.task_always_eager
        )
        if not own_retry:
            return super().publish(ctx)
        token = header(request, HEADER_PARK_TOKEN)
        return retry_at_head(
            task,
            ctx.name,
            ctx.task_id,
            task.redislock_limit(ctx.args, ctx.kwargs),
            ctx.need_send(),
            task.redislock_rate(ctx.args, ctx.kwargs),
            copy_token(token, os.getpid()),
        )


def _check_supersede(task: Any) -> None:
    """``lock_supersede``: a bool, with the ``keep_latest`` policy only."""
    name = getattr(task, "name", None) or task.__name__
    if not isinstance(task.lock_supersede, bool):
        raise TypeError(f"task {name}: lock_supersede must be a bool, got {task.lock_supersede!r}")
    if task.lock_supersede and task.lock_policy != KeepLatest.name:
        raise ValueError(
            f"task {name}: lock_supersede needs lock_policy='keep_latest' (the newer call "
            f"waits in the park until the superseded run ends), not {task.lock_policy!r}"
        )


def _check_throttle(task: Any) -> None:
    """``lock_throttle``: a positive number of seconds, with the ``keep_latest``
    policy, not with ``lock_debounce``; ``lock_throttle_trailing`` a bool."""
    name = getattr(task, "name", None) or task.__name__
    if not isinstance(task.lock_throttle_trailing, bool):
        raise TypeError(
            f"task {name}: lock_throttle_trailing must be a bool, got "
            f"{task.lock_throttle_trailing!r}"
        )
    if task.lock_throttle is None:
        if not task.lock_throttle_trailing:
            raise ValueError(f"task {name}: lock_throttle_trailing needs lock_throttle")
        return
    check_ttl(task.lock_throttle, "lock_throttle")
    if task.lock_debounce is not None:
        raise ValueError(f"task {name}: set lock_throttle or lock_debounce, not both")
    if task.lock_policy != KeepLatest.name:
        raise ValueError(
            f"task {name}: lock_throttle needs lock_policy='keep_latest' (a throttled "
            f"call waits in the park as its key's pending run), not {task.lock_policy!r}"
        )


def _check_debounce(task: Any) -> None:
    """``lock_debounce`` / ``lock_debounce_max``: positive numbers, the bound no
    shorter than the quiet period, and only with the ``keep_latest`` policy."""
    debounce, bound = task.lock_debounce, task.lock_debounce_max
    name = getattr(task, "name", None) or task.__name__
    if debounce is None:
        if bound is not None:
            raise ValueError(f"task {name}: lock_debounce_max needs lock_debounce")
        return
    check_ttl(debounce, "lock_debounce")
    if bound is not None and check_ttl(bound, "lock_debounce_max") < debounce:
        raise ValueError(
            f"task {name}: lock_debounce_max ({bound!r}) must be >= lock_debounce ({debounce!r})"
        )
    if task.lock_policy != KeepLatest.name:
        raise ValueError(
            f"task {name}: lock_debounce needs lock_policy='keep_latest' (a debounced call "
            f"waits in the park as its key's pending run), not {task.lock_policy!r}"
        )
