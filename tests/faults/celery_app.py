"""The Celery app of the fault-injection run (property 6).

Run by ``celery -A tests.faults.celery_app worker`` (see ``celery_run.py``),
configured from ``REDISLOCK_TEST_*`` variables like ``tests/celery_apps``.
Every body appends ``body_start`` / ``body_end`` events, stamped with Redis
TIME, to the history in the recording server (``history.py``): the check
that no key is run by two bodies at once comes from the bodies themselves.

``acks_late`` + ``task_reject_on_worker_lost``: a task whose child or worker
is SIGKILLed is redelivered (child: at once; whole worker: after the
broker's visibility timeout), so every task eventually succeeds.  Contended
tasks use the ``retry`` policy with no requeue limit.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

from celery_redislock import LockedTask, SemaphoreTask
from tests.celery_apps import write_pid_when_ready

from .history import Recorder

ENV_PREFIX = "REDISLOCK_TEST_"
SEMAPHORE_LIMIT = 2


def config_from_env() -> dict[str, str]:
    return {
        k[len(ENV_PREFIX) :].lower(): v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)
    }


class _PerProcess:
    """A Recorder per process (pool children are forked)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pid = 0
        self.rec: Recorder | None = None

    def __call__(self, event: str, **fields: Any) -> float:
        if self.rec is None or self.pid != os.getpid():
            self.rec = Recorder(redis.Redis.from_url(self.url, socket_timeout=30), "body")
            self.pid = os.getpid()
        return self.rec(event, **fields)


def create_app(config: dict[str, str]) -> Celery:
    url = config["redis"]
    app = Celery("faults", set_as_current=False)
    app.conf.update(
        broker_url=config.get("broker", url),
        result_backend=url,
        redislock_url=url,
        redislock_prefix=config["prefix"],
        redislock_default_ttl=float(config["ttl"]),
        task_default_queue=f"q-{config['prefix']}",
        worker_prefetch_multiplier=1,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # A whole-worker SIGKILL leaves its reserved messages in the transport's
        # "unacked" hash; they are restored visibility_timeout after delivery,
        # by a sweep that kombu runs every interval * throttle = 100 s by default,
        # under a mutex that a worker killed mid-sweep holds for its expiry (300 s).
        broker_transport_options={
            "visibility_timeout": float(config["visibility"]),
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
            "unacked_mutex_expire": 5,
        },
        broker_connection_retry_on_startup=True,
        # "faults.limited" uses the park policy (SemaphoreTask's default): a
        # promotion whose message a kill lost is re-published after this
        # deadline, which must fit in the calm phase (and exceed a slow publish).
        redislock_park_deadline=6.0,
        redislock_park_sweep_interval=0.5,
        result_expires=600,
        worker_hijack_root_logger=False,
    )
    record = _PerProcess(config["rec"])

    def body(task: Any, kind: str, key: str, n: int, duration: float) -> int:
        lease = task.request.redislock
        fields = {"r": f"{kind}:{key}", "n": n, "id": task.request.id, "pid": os.getpid()}
        record("body_start", tok=lease.token, **fields)
        time.sleep(duration)
        record("body_end", owned=lease.owned(), **fields)
        return n

    retry = {"lock_retry_countdown": 0.05, "lock_retry_jitter": 0.2, "lock_retry_max": None}

    @app.task(
        bind=True,
        shared=False,
        base=LockedTask,
        name="faults.locked",
        lock_key="fk:{key}",
        lock_policy="retry",
        **retry,
    )
    def locked(self: Any, key: str, n: int, duration: float) -> int:
        return body(self, "lock", key, n, duration)

    @app.task(
        bind=True,
        shared=False,
        base=SemaphoreTask,
        name="faults.limited",
        semaphore_key="fs:{key}",
        semaphore_limit=SEMAPHORE_LIMIT,
        **retry,
    )
    def limited(self: Any, key: str, n: int, duration: float) -> int:
        return body(self, "sem", key, n, duration)

    return app


if os.environ.get(ENV_PREFIX + "PREFIX"):
    app = create_app(config_from_env())
    write_pid_when_ready(ENV_PREFIX + "READY_FILE")
