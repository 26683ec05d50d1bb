"""How one run of a guarded task gets its lease before the body runs.

The lock name and the limit are computed from the call's arguments (a
callable limit per run), the lease set is built with an owner prefix naming
this task id and process, and the run's policy (per-call header, else the
task's ``lock_policy``) asks for the slot.  Fail closed: a Redis error is
logged in one line naming the URL and setting, and re-raised; the body
never runs without the lease.  A refused run is handed to the policy's
``contended``, which ends it visibly.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from . import options, signals
from .core.leaseset import LeaseSet
from .core.owners import execution_prefix
from .diagnose import fail_closed
from .policies import POLICIES, Attempt, announce_contended, check_policy, defer_to_earlier_delivery
from .release import lost_signal

__all__ = ["enter"]

log = logging.getLogger("celery_redislock")


def enter(task: Any, request: Any, args: Any, kwargs: Any) -> LeaseSet:
    """The held lease set of this run, or an exception that ends the run
    (the policy's, or the Redis error)."""
    name = task.redislock_name(args, kwargs)
    policy = POLICIES[check_policy(options.header(request, options.HEADER_POLICY)
                                   or task.lock_policy)]  # fmt: skip
    ttl, wait_timeout = options.run_options(request, task.lock_wait_timeout)
    limit = task.redislock_limit(args, kwargs)  # per run, before any Redis call
    try:
        lease_set: LeaseSet = task.redislock_leaseset(
            name, ttl=ttl, limit=limit, owner_prefix=execution_prefix(request.id, os.getpid()),
            on_lost=lost_signal(task, request.id), task_id=request.id,
        )  # fmt: skip
        attempt = Attempt(task, request, args, kwargs, name, lease_set, wait_timeout)
        request.redislock_policy = policy
        defer_to_earlier_delivery(attempt)
        started = time.monotonic()
        acquired = policy.acquire(attempt)
    except (RedisError, RedisClusterException) as exc:
        log.error("%s", fail_closed(task.app, task.name, request.id, name, exc))
        raise
    if acquired:
        signals.lock_acquired.send(
            sender=task, task_id=request.id, name=name, token=lease_set.token,
            kind=task._redislock_kind, waited=time.monotonic() - started,
        )  # fmt: skip
        return lease_set
    defer_to_earlier_delivery(attempt, contended=True)
    announce_contended(attempt, policy.name)
    policy.contended(attempt)
