"""The Celery app of part "coalesce" (benchmarks/coalesce_bench.py): one cache
rebuild, guarded three ways.

Each task reads ``coal:src:<key>`` (the source), takes ``REBUILD`` seconds,
then writes what it read to ``coal:cache:<key>`` and appends its start time
to ``coal:starts:<key>``.  Configured from the environment like
``benchmarks.celery_app`` (``BENCH_REDIS_URL``, ``BENCH_READY_FILE``).
"""

# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

import os
import time

from celery import Celery

from celery_redislock import LockedTask

from . import task_events

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
REBUILD = 0.3
DEBOUNCE = 0.3

app = Celery("coalesce", broker=URL, set_as_current=False)
app.conf.update(
    redislock_url=URL,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


def rebuild(key: str) -> None:
    r = task_events.client(URL)
    r.rpush(f"coal:starts:{key}", repr(time.time()))
    value = r.get(f"coal:src:{key}") or b"0"
    time.sleep(REBUILD)
    r.set(f"coal:cache:{key}", value)


@app.task(base=LockedTask, lock_key="coal:skip:{key}", lock_policy="skip", name="coal.skip")
def skip(key: str) -> None:
    rebuild(key)


@app.task(
    base=LockedTask,
    lock_key="coal:latest:{key}",
    lock_policy="keep_latest",
    name="coal.keep_latest",
)
def keep_latest(key: str) -> None:
    rebuild(key)


@app.task(
    base=LockedTask,
    lock_key="coal:debounce:{key}",
    lock_policy="keep_latest",
    lock_debounce=DEBOUNCE,
    name="coal.debounce",
)
def debounce(key: str) -> None:
    rebuild(key)


task_events.announce_ready()
