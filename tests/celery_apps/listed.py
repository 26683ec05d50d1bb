"""Test app: the basic app plus a task with a per-account cap and a listed shared cap.

``listed.charge(account_id, n)`` holds a slot of ``acct:<account_id>``
(``semaphore_limit=2``) and of the listed limit ``shared`` (3, or the
integer at ``<prefix>:shared-limit``), under the ``retry`` policy.  Its body
records ``start`` (with the listed names its run holds) and ``end`` events
into ``<prefix>:rec:charge:all``; with ``gate`` it runs until the test sets
``<prefix>:gate:<account_id>:<n>``.

Run as ``celery -A tests.celery_apps.listed worker`` with the basic app's
``REDISLOCK_TEST_*`` environment (see :mod:`tests.celery_apps.basic`).
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery

from celery_redislock import Limit, SemaphoreTask

from . import write_pid_when_ready
from .basic import ENV_PREFIX, config_from_env, create_app

SHARED = "shared"


def create_listed_app(config: dict[str, str]) -> Celery:
    app = create_app(config)
    rec = app.recorder  # type: ignore[attr-defined]
    prefix = config["prefix"]

    def shared_limit(**_: Any) -> int:
        return int(rec.client.get(f"{prefix}:shared-limit") or 3)

    def charge(
        self: Any, account_id: str, n: int, gate: bool = False, duration: float = 0.2
    ) -> int:
        listed = [lease.name for lease in self.request.redislock_listed]
        rec.event(self, "all", "start", account=account_id, n=n, listed=listed)
        if gate:  # hold the slots until the test opens this task's gate (or 120 s)
            deadline = time.monotonic() + 120
            while not rec.client.exists(f"{prefix}:gate:{account_id}:{n}"):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
        else:
            time.sleep(duration)
        rec.event(self, "all", "end", account=account_id, n=n)
        return n

    app.task(
        name="listed.charge",
        shared=False,
        bind=True,
        base=SemaphoreTask,
        semaphore_key="acct:{account_id}",
        semaphore_limit=2,
        lock_policy="retry",
        lock_retry_countdown=0.05,
        lock_retry_jitter=0.2,
        lock_retry_max=None,
        limits=[Limit(SHARED, shared_limit)],
    )(charge)
    return app


if os.environ.get(ENV_PREFIX + "PREFIX"):
    app = create_listed_app(config_from_env())
    write_pid_when_ready(ENV_PREFIX + "READY_FILE")
