"""Test app: the basic app plus a SemaphoreTask whose limit is each account's plan.

The plan of account ``a`` is the integer at ``<prefix>:plan:a`` (default 1),
so a test changes it while the worker runs, as an operator would change a
customer's plan in a database.  ``limits.plan_sync`` records ``start`` (with
the limit its run was admitted under and the holders Redis showed at that
moment) and ``end`` events like the basic app's tasks.

Run as ``celery -A tests.celery_apps.limits worker`` with the basic app's
``REDISLOCK_TEST_*`` environment (see :mod:`tests.celery_apps.basic`).
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery

from celery_redislock import SemaphoreTask

from . import write_pid_when_ready
from .basic import ENV_PREFIX, config_from_env, create_app


def create_limits_app(config: dict[str, str]) -> Celery:
    app = create_app(config)
    rec = app.recorder  # type: ignore[attr-defined]
    prefix = config["prefix"]

    def plan_limit(account_id: Any) -> int:
        return int(rec.client.get(f"{prefix}:plan:{account_id}") or 1)

    def plan_sync(
        self: Any, account_id: Any, n: int, gate: bool = False, duration: float = 0.2
    ) -> Any:
        lease = self.request.redislock
        holders = lease.holders()
        rec.event(
            self,
            account_id,
            "start",
            n=n,
            limit=lease.limit,
            holders=len(holders),
            meta_limit=[h.meta.get("limit") for h in holders if h.owner == lease.lease.owner],
        )
        if gate:  # hold the slot until the test opens this task's gate (or 120 s)
            deadline = time.monotonic() + 120
            while not rec.client.exists(f"{prefix}:gate:{account_id}:{n}"):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
        else:
            time.sleep(duration)
        rec.event(self, account_id, "end", n=n)
        return n

    common = {
        "shared": False,
        "bind": True,
        "base": SemaphoreTask,
        "semaphore_key": "plan:{account_id}",
        "semaphore_limit": lambda account_id, **_: plan_limit(account_id),
    }
    app.task(
        name="limits.plan_sync",
        lock_policy="retry",
        lock_retry_countdown=0.1,
        lock_retry_jitter=0.1,
        lock_retry_max=None,
        **common,
    )(plan_sync)
    app.task(name="limits.plan_sync_park", lock_policy="park", **common)(plan_sync)
    return app


if os.environ.get(ENV_PREFIX + "PREFIX"):
    app = create_limits_app(config_from_env())
    write_pid_when_ready(ENV_PREFIX + "READY_FILE")
