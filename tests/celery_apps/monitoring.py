"""Test app for what monitoring sees (tests/celery/test_monitoring.py).

Config (``REDISLOCK_TEST_<KEY>`` in the worker's environment, as in
``basic.py``): ``redis`` (broker and lock Redis), ``prefix`` (lock key prefix
and queue name), ``backend`` (the result backend URL; default ``redis``),
``ready_file``.  Task events: the caller sends ``task-sent``
(``task_send_sent_event``); the worker sends task events when started with
``-E``.  Each body appends ``<task id> <retries>`` to ``<prefix>:runs`` when
it starts, so a test knows which calls ran.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

from celery_redislock import LockedTask, SemaphoreTask

from . import write_pid_when_ready
from .basic import ENV_PREFIX, config_from_env


def create_app(config: dict[str, str]) -> Celery:
    url, prefix = config["redis"], config["prefix"]
    app = Celery("monitoring", set_as_current=False)
    app.conf.update(
        broker_url=url,
        result_backend=config.get("backend") or url,
        redislock_prefix=prefix,
        task_default_queue=f"q-{prefix}",
        task_send_sent_event=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        result_expires=600,
        worker_hijack_root_logger=False,
        redislock_park_sweep_interval=0.5,
    )
    runs = redis.Redis.from_url(url)

    def ran(task: Any, duration: float) -> str:
        runs.rpush(f"{prefix}:runs", f"{task.request.id} {task.request.retries}")
        time.sleep(duration)
        return str(task.request.id)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="mon.rebuild",
        lock_key="latest:{key}",
        lock_policy="keep_latest",
    )
    def rebuild(self: Any, key: str, duration: float = 0.3) -> str:
        return ran(self, duration)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="mon.trailing",
        lock_key="trail:{key}",
        lock_policy="keep_latest",
        lock_throttle=0.3,
    )
    def trailing(self: Any, key: str, duration: float = 0.05) -> str:
        return ran(self, duration)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="mon.skipping",
        lock_key="skip:{key}",
        lock_policy="skip",
    )
    def skipping(self: Any, key: str, duration: float = 0.0) -> str:
        return ran(self, duration)

    @app.task(
        shared=False,
        bind=True,
        base=SemaphoreTask,
        name="mon.capped",
        semaphore_key="cap:{key}",
        semaphore_limit=1,
    )
    def capped(self: Any, key: str, duration: float = 0.0) -> str:
        return ran(self, duration)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="mon.requeued",
        lock_key="rq:{key}",
        lock_policy="retry",
        lock_retry_countdown=0.2,
        lock_retry_jitter=0.0,
    )
    def requeued(self: Any, key: str, duration: float = 0.0) -> str:
        return ran(self, duration)

    return app


if os.environ.get(ENV_PREFIX + "PREFIX"):  # `celery -A tests.celery_apps.monitoring worker`
    app = create_app(config_from_env())
    write_pid_when_ready(ENV_PREFIX + "READY_FILE")
