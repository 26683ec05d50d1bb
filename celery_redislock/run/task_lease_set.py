"""The lease set a guarded task uses for one lock name.

A :class:`~celery_redislock.RedisLock` for a ``LockedTask``, a
:class:`~celery_redislock.FairSemaphore` with the call's limit for a
``SemaphoreTask``, on the app's Redis, with the task's ttl, and holder
metadata (task name, task id, limit) that ``celery redislock status`` shows.
"""

from __future__ import annotations

from typing import Any

from ..core.capacity import Capacity
from ..core.leaseset import LeaseSet
from ..core.lock import RedisLock
from ..core.semaphore import FairSemaphore
from ..settings import client_for

__all__ = ["capacity_of", "lease_set_for"]


def capacity_of(task: Any, limit: int) -> Capacity:
    """What a call of ``task`` with this ``limit`` may hold: a lock (a
    ``LockedTask``: fixed, a run-time override never shares it), a rate with
    no cap (a ``RateLimitedTask``), else a semaphore of ``limit`` slots."""
    kind = task._redislock_kind
    if kind == "lock":
        return Capacity.lock()
    if kind == "rate":
        return Capacity.rate()
    return Capacity.semaphore(limit)


def lease_set_for(
    task: Any,
    name: str,
    *,
    ttl: float | None = None,
    limit: int | None = None,
    owner_prefix: str = "",
    on_lost: Any = None,
    task_id: str | None = None,
) -> LeaseSet:
    """The lease set of ``task`` for ``name``.

    ``limit``: the call's slot limit (``task.redislock_limit(args, kwargs)``);
    needed when ``semaphore_limit`` is a callable, else the fixed limit is
    used.  ``ttl``: None for the task's ``lock_ttl`` / ``semaphore_ttl``, else
    ``redislock_default_ttl``.
    """
    client, settings = client_for(task.app)
    if task._redislock_kind == "lock":
        limit = 1
    elif limit is None:
        limit = task.redislock_limit()
    meta: dict[str, Any] = {"task": task.name, "limit": limit}
    if task_id is not None:
        meta["task_id"] = task_id
    common: dict[str, Any] = {
        "ttl": ttl or task._redislock_ttl_option() or settings.default_ttl,
        "prefix": settings.prefix,
        "owner_prefix": owner_prefix,
        "on_lost": on_lost,
        "meta": meta,
        "index": True,  # the exporter's slot gauges (core/keys.py held_index)
    }
    if task._redislock_kind == "lock":
        return RedisLock(client, name, **common)
    return FairSemaphore(client, name, limit, **common)
