"""Test app: guarded tasks whose bodies keep the process busy, for every pool.

``busy_lock`` (:class:`LockedTask`) and ``busy_slot`` (:class:`SemaphoreTask`,
limit 1) hold ``busy:{key}`` with a short lease (config ``lease``, seconds)
and keep their process busy for ``seconds``:

* ``mode="py"``: a pure-Python loop that never sleeps (under gevent/eventlet
  it never yields to another greenlet);
* ``mode="c"``: ONE C call holding the GIL throughout (``sum(range(n))``,
  ``n`` calibrated in the worker process to last ``seconds``);
* ``mode="sleep"``: ``time.sleep`` (yields under gevent/eventlet).

Each run appends JSON ``start``/``end`` events (wall-clock ``t``, pid, the
C call's measured duration, ``owned()`` at the end) to
``<prefix>:rec:<key>``; ``lock_lost`` signals go to ``<prefix>:lost``.
Config as in ``tests/celery_apps/basic.py`` (``REDISLOCK_TEST_*``):
``redis``, ``prefix``, ``lease``, ``ready_file``, ``allow_green`` ("1":
``redislock_allow_green_pool``).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Celery

from celery_redislock import LockedTask, SemaphoreTask, signals

from . import write_pid_when_ready
from .basic import ENV_PREFIX, config_from_env

_PER_UNIT: list[float] = []  # seconds per sum(range(1_000_000)) in this process


def c_call(seconds: float) -> float:
    """Hold the GIL in one C call for about ``seconds``; returns how long it took."""
    if not _PER_UNIT:  # the fastest of a few samples: the real call lasts at least `seconds`
        samples = []
        for _ in range(5):
            started = time.perf_counter()
            sum(range(1_000_000))
            samples.append(time.perf_counter() - started)
        _PER_UNIT.append(min(samples))
    n = int(seconds / _PER_UNIT[0] * 1_000_000)
    started = time.perf_counter()
    sum(range(n))
    return time.perf_counter() - started


def busy(mode: str, seconds: float) -> float:
    """Keep this process busy for ``seconds`` the way ``mode`` says; returns the C call's time."""
    if mode == "c":
        return c_call(seconds)
    if mode == "py":
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            pass
        return 0.0
    if mode == "sleep":
        time.sleep(seconds)
        return 0.0
    raise ValueError(f"unknown mode {mode!r}")


def create_app(config: dict[str, str]) -> Celery:
    redis_url = config["redis"]
    prefix = config["prefix"]
    lease = float(config.get("lease", 1.0))
    app = Celery("pools", set_as_current=False)
    app.conf.update(
        broker_url=redis_url,
        result_backend=redis_url,
        redislock_url=redis_url,
        redislock_prefix=prefix,
        task_default_queue=f"q-{prefix}",
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        result_expires=600,
        worker_hijack_root_logger=False,
        redislock_allow_green_pool=config.get("allow_green") == "1",
    )
    state: dict[str, Any] = {}

    def client() -> Any:
        if state.get("pid") != os.getpid():
            state["client"] = redis.Redis.from_url(redis_url, socket_timeout=10)
            state["pid"] = os.getpid()
        return state["client"]

    def record(task: Any, key: str, what: str, **data: Any) -> None:
        event = {"what": what, "t": time.time(), "pid": os.getpid(), "id": task.request.id}
        client().rpush(f"{prefix}:rec:{key}", json.dumps({**event, **data}))

    def body(task: Any, key: str, seconds: float, mode: str) -> bool:
        lease_set = task.request.redislock
        record(task, key, "start", token=lease_set.token)
        took = busy(mode, seconds)
        owned = lease_set.owned()
        record(task, key, "end", owned=owned, c_call=took)
        return owned

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="pools.busy_lock",
        lock_key="busy:{key}",
        lock_ttl=lease,
    )
    def busy_lock(self: Any, key: str, seconds: float, mode: str) -> bool:
        return body(self, key, seconds, mode)

    @app.task(
        shared=False,
        bind=True,
        base=SemaphoreTask,
        name="pools.busy_slot",
        semaphore_key="busy:{key}",
        semaphore_limit=1,
        semaphore_ttl=lease,
        lock_policy="skip",
    )
    def busy_slot(self: Any, key: str, seconds: float, mode: str) -> bool:
        return body(self, key, seconds, mode)

    def on_lost(sender: Any = None, **kwargs: Any) -> None:
        if getattr(sender, "app", None) is app:
            event = {"t": time.time(), "pid": os.getpid(), "reason": kwargs.get("reason")}
            client().rpush(f"{prefix}:lost", json.dumps(event))

    signals.lock_lost.connect(on_lost, weak=False)
    return app


if os.environ.get(ENV_PREFIX + "PREFIX"):
    app = create_app(config_from_env())
    write_pid_when_ready(ENV_PREFIX + "READY_FILE")
