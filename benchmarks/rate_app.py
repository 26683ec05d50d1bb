"""The Celery app of the rate benchmark (``benchmarks.rate_bench``).

Three ways to hold a key to ``RATE`` starts a second, each a task of 5 ms:

* ``park``: ``RateLimitedTask(rate_key="rate:{run}:{account}", rate=RATE)``,
  this library (over-rate work waits in the park with its eligible time);
* ``celery``: Celery's own ``rate_limit=RATE`` (a token bucket in each
  worker, per task type, not per key);
* ``retry``: the recipe users write today: a ``RateLimiter`` per key in the
  body, and ``self.retry(countdown=retry_after)`` when it refuses;
* ``timer``: the control, no limiter at all: the benchmark itself publishes
  the heavy key's tasks on an exact ``RATE`` schedule, so its starts show
  what the broker and the workers add to a perfect schedule.

Configured from the environment (``BENCH_REDIS_URL``, ``BENCH_EVENTS_DIR``,
``BENCH_READY_FILE``, ``BENCH_RATE``).  Events go to one file per process
(lines ``task|retry|eta``), as in ``benchmarks.backlog_app``.
"""

# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery

from celery_redislock import RateLimitedTask, RateLimiter

from . import task_events

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
RATE = os.environ.get("BENCH_RATE", "50/s")
TASK_SECONDS = 0.005

app = Celery("rate", broker=URL, set_as_current=False)
app.conf.update(
    redislock_url=URL,
    redislock_prefix="ratebench",
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    redislock_park_deadline=120.0,
)


def _log(line: str) -> None:
    task_events.log(URL, line)


def _redis() -> Any:
    return task_events.process_state(URL)["redis"]


def _body(run: str, account: str, seq: int, sent: float) -> None:
    start = time.time()
    time.sleep(TASK_SECONDS)
    _log(f"task {run} {account} {seq} {sent:.6f} {start:.6f}")
    _redis().incr(f"ratebench:done:{run}")


@app.task(base=RateLimitedTask, name="rate.park", rate_key="rate:{run}:{account}", rate=RATE)
def park(run: str, account: str, seq: int, sent: float) -> None:
    _body(run, account, seq, sent)


@app.task(name="rate.celery", rate_limit=RATE)
def celery_rate_limit(run: str, account: str, seq: int, sent: float) -> None:
    _body(run, account, seq, sent)


@app.task(bind=True, name="rate.retry", max_retries=None)
def retry(self: Any, run: str, account: str, seq: int, sent: float) -> None:
    limiter = RateLimiter(_redis(), f"rate:{run}:{account}", rate=RATE, prefix="ratebench")
    decision = limiter.try_acquire()
    if not decision:
        raise self.retry(countdown=decision.retry_after)
    _body(run, account, seq, sent)


@app.task(name="rate.timer")
def timer(run: str, account: str, seq: int, sent: float) -> None:
    """The control: a plain task the benchmark publishes on an exact schedule."""
    _body(run, account, seq, sent)


TASKS = {"park": park, "celery": celery_rate_limit, "retry": retry, "timer": timer}

task_events.record_retries_and_etas(URL)
