"""The example Celery app: three tasks, one for each use case.

* :func:`refresh_cache` -- single-flight rebuild of a slow cache entry
  (``LockedTask``, policy ``skip``): a stampede of requests for one user runs
  the slow query once; the others are skipped while it runs and find the
  entry fresh afterwards.
* :func:`sync_account` -- at most 5 concurrent syncs per account
  (``SemaphoreTask``, fair semaphore, policy ``park``: contended jobs
  wait in Redis, not in the broker queue): a heavy account
  cannot take every worker process from the light ones.
* :func:`generate_report` -- one report at a time per account (``LockedTask``,
  policy ``wait``): queued tasks are handed the lock in FIFO order, and each
  write is fenced with the lock's token.

Configuration comes from the environment, so the demo, the tests and
docker compose run the very same app:

``REDIS_URL``          broker, result backend and locks (default redis://localhost:6379/0)
``EXAMPLE_NAMESPACE``  queue name, lock key prefix and record prefix (default ``example``)

Run a worker with ``celery -A example_worker.app worker -P prefork -c 8``.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from celery import Celery, Task
from celery.signals import task_postrun, worker_ready

from celery_redislock import LockedTask, SemaphoreTask
from celery_redislock.signals import (
    lock_acquired,
    lock_contended,
    lock_lost,
    lock_parked,
    lock_released,
)

from .records import Recorder, namespace, redis_url

__all__ = ["app", "generate_report", "refresh_cache", "sync_account"]

#: Slots per account for sync_account.
ACCOUNT_LIMIT = 5
#: How long a rebuilt cache entry stays fresh.
CACHE_FRESH_SECONDS = 300

app = Celery("example_worker")
app.conf.update(
    broker_url=redis_url(),
    result_backend=redis_url(),
    result_expires=600,
    task_default_queue=namespace(),
    redislock_prefix=namespace(),
    redislock_default_ttl=10.0,
    # One message at a time per pool process: a worker does not hoard a
    # heavy account's backlog while other accounts' messages wait.
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

_recorder: Recorder | None = None


def recorder() -> Recorder:
    """The process's recorder (redis-py reconnects by itself after a fork)."""
    global _recorder
    if _recorder is None:
        _recorder = Recorder.from_env()
    return _recorder


# -- the fenced cache write ------------------------------------------------------

# Stores the entry only if this writer's fencing token is newer than the one
# that wrote it last: a rebuild that lost its lock (paused past its TTL) and
# wakes up after a newer rebuild cannot overwrite the newer value.
_FENCED_STORE = """
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2], 'built_at', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""


def fenced_store(key: str, token: int, value: str) -> bool:
    """Write ``value`` under ``key`` unless a newer token already wrote it."""
    client = recorder().client
    stored = client.eval(_FENCED_STORE, 1, key, token, value, time.time(), CACHE_FRESH_SECONDS)
    return bool(stored)


def slow_query(seconds: float) -> None:
    """Stands in for the expensive database query or API call."""
    time.sleep(seconds)


# -- use case 1: single-flight cache refresh ---------------------------------------


@app.task(bind=True, base=LockedTask, lock_key="cache:{user_id}", lock_policy="skip")
def refresh_cache(self: Task, user_id: int, query_seconds: float = 2.0) -> str:
    """Rebuild the cache entry of ``user_id`` unless it is fresh.

    The check and the rebuild run under the lock, so of a stampede of
    requests exactly one rebuilds; the others are skipped (state ``SKIPPED``)
    while it runs, or find the entry fresh afterwards.
    """
    rec = recorder()
    key = rec.key(f"cache:{user_id}")
    start = time.time()
    lock = self.request.redislock
    if rec.client.exists(key):
        rec.run(task="refresh_cache", user=user_id, outcome="fresh", start=start, end=time.time())
        return "fresh"
    slow_query(query_seconds)
    stored = fenced_store(key, lock.token, f"profile of user {user_id}")
    rec.run(
        task="refresh_cache",
        user=user_id,
        outcome="rebuilt" if stored else "stale-write-refused",
        token=lock.token,
        start=start,
        end=time.time(),
    )
    return "rebuilt"


# -- use case 2: per-account concurrency cap -------------------------------------------


@app.task(
    bind=True,
    base=SemaphoreTask,
    semaphore_key="account:{account_id}",
    semaphore_limit=ACCOUNT_LIMIT,
    lock_policy="park",
)
def sync_account(self: Task, account_id: str, job: int, seconds: float = 0.3) -> int:
    """Sync one batch of ``account_id`` with a rate-limited partner API.

    At most ``ACCOUNT_LIMIT`` run at once per account; a task that finds the
    account's slots taken is requeued (policy ``retry``, with jitter).
    """
    start = time.time()
    slow_query(seconds)
    recorder().run(
        task="sync_account",
        account=account_id,
        job=job,
        task_id=self.request.id,
        token=self.request.redislock.token,
        start=start,
        end=time.time(),
    )
    return job


# -- use case 3: one report at a time, in order ------------------------------------------


@app.task(
    bind=True,
    base=LockedTask,
    lock_key="report:{account_id}",
    lock_policy="wait",
    lock_wait_timeout=120,
)
def generate_report(self: Task, account_id: str, seconds: float = 0.5) -> int:
    """Build the monthly report of ``account_id``, one at a time.

    Tasks that find the lock held wait in a FIFO queue and are handed the
    lock by the release (no polling).  The fencing token tags the write.
    """
    start = time.time()
    slow_query(seconds)
    token = int(self.request.redislock.token)
    recorder().run(
        task="generate_report",
        account=account_id,
        task_id=self.request.id,
        token=token,
        start=start,
        end=time.time(),
    )
    return token


# -- recording what the library reports ----------------------------------------------------


@lock_contended.connect
def _on_contended(sender: Any = None, name: str = "", policy: str = "", **_: Any) -> None:
    recorder().count("contended", f"{name}|{policy}")


@lock_parked.connect
def _on_parked(sender: Any = None, name: str = "", **_: Any) -> None:
    recorder().count("contended", f"{name}|park")


@lock_acquired.connect
def _on_acquired(
    sender: Any = None, name: str = "", token: int = 0, waited: float = 0.0, **_: Any
) -> None:
    recorder().append("acquired", name=name, token=token, waited=waited)


@lock_released.connect
def _on_released(sender: Any = None, reason: str = "", held: bool = True, **_: Any) -> None:
    recorder().count("released", f"{reason}|{held}")


@lock_lost.connect
def _on_lost(sender: Any = None, name: str = "", reason: str = "", **_: Any) -> None:
    recorder().append("lost", name=name, reason=reason)


@task_postrun.connect
def _on_postrun(sender: Any = None, state: str | None = None, **_: Any) -> None:
    if sender is not None and state != "RETRY":  # a requeue is not the end of a task
        recorder().count("done", str(sender.name).rsplit(".", 1)[-1])


@worker_ready.connect
def _on_ready(sender: Any = None, **_: Any) -> None:
    recorder().ready(getattr(sender, "hostname", None) or socket.gethostname())
