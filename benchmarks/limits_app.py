"""The Celery app of the several-limits benchmark (``benchmarks.limits_bench``).

Two ways to run an account's tasks, each of ``BENCH_TASK_SECONDS``, under
``park``:

* ``single``: ``SemaphoreTask(semaphore_key="acct:{run}:{account}",
  semaphore_limit=3)``: the per-account limit alone;
* ``listed``: the same plus ``limits=[Limit("shared:<BENCH_RUN>", BENCH_SHARED)]``:
  at most ``BENCH_SHARED`` of all accounts at once, on a shared downstream
  (one name for every call, as a real shared limit is; ``BENCH_RUN`` keeps
  runs apart);
* ``floor``: the same with a listed limit of ``FLOOR`` that is never full:
  each run takes and gives back its listed lease and nothing waits for it,
  the least two limits cost here (a control);
* ``trips``: ``single`` plus two minimal script round trips per run, a
  ``SET NX PX`` before the body and a compare-and-delete after it: what a
  second limit costs in round trips alone (a control; it keeps none of the
  guarantees);
* ``handoff``: ``floor`` whose every release holds its key's parked work
  for the listed limit and then promotes one in a call of its own
  (``park_unhold.lua``): the least a fair hand-off of a slot from one key to
  another costs when each key's park is its own slot (a control: nothing
  waits for its limit).

Configured from the environment (``BENCH_REDIS_URL``, ``BENCH_EVENTS_DIR``,
``BENCH_READY_FILE``, ``BENCH_SHARED``, ``BENCH_TASK_SECONDS``, ``BENCH_RUN``).  Each body
writes a line ``task <run> <account> <seq> <sent> <start> <end>`` to its
process's event file (``benchmarks.task_events``).
"""

# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery

from celery_redislock import Limit, SemaphoreTask

from . import task_events

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
PER_ACCOUNT = 3
SHARED = int(os.environ.get("BENCH_SHARED", "10"))
TASK_SECONDS = float(os.environ.get("BENCH_TASK_SECONDS", "0.2"))
RUN = os.environ.get("BENCH_RUN", "")
FLOOR = 1_000_000  # never full

app = Celery("limits", broker=URL, set_as_current=False)
app.conf.update(
    redislock_url=URL,
    redislock_prefix="limitsbench",
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    redislock_park_deadline=120.0,
)


def _body(run: str, account: str, seq: int, sent: float) -> None:
    start = time.time()
    time.sleep(TASK_SECONDS)
    end = time.time()
    task_events.log(URL, f"task {run} {account} {seq} {sent:.6f} {start:.6f} {end:.6f}")
    task_events.process_state(URL)["redis"].incr(f"limitsbench:done:{run}")


def _account_task(contender: str, limits: list[Limit]) -> Any:
    """One contender's task: an account's run under its per-account limit
    (``park``, the default of ``SemaphoreTask``), and ``limits``."""

    def account_run(run: str, account: str, seq: int, sent: float) -> None:
        _body(run, account, seq, sent)

    return app.task(
        base=SemaphoreTask,
        name=f"limits.{contender}",
        semaphore_key="acct:{run}:{account}",
        semaphore_limit=PER_ACCOUNT,
        limits=limits,
    )(account_run)


TRIP_TAKE = "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 60000)"
TRIP_GIVE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


def _trips_task() -> Any:
    """The ``trips`` control's task (see the module docstring)."""

    def account_run(run: str, account: str, seq: int, sent: float) -> None:
        redis = task_events.process_state(URL)["redis"]
        key = f"trips:{{{run}}}:{account}:{seq}"
        redis.eval(TRIP_TAKE, 1, key, "1")
        _body(run, account, seq, sent)
        redis.eval(TRIP_GIVE, 1, key, "1")

    return app.task(
        base=SemaphoreTask,
        name="limits.trips",
        semaphore_key="acct:{run}:{account}",
        semaphore_limit=PER_ACCOUNT,
    )(account_run)


def _split_release() -> None:
    """The ``handoff`` control's release (see the module docstring), in place
    of ``Park.release`` for that task only."""
    from functools import partial

    from celery_redislock.parking.promotion import release_and_promote, wake_name
    from celery_redislock.policies.park import Park

    original = Park.release

    def release(self: Any, ctx: Any) -> None:
        if ctx.task.name != "limits.handoff":
            original(self, ctx)
            return
        task, lease_set, limit = ctx.task, ctx.need_lease_set(), ctx.need_limit()
        listed = f"handoff:{RUN}"
        release_and_promote(
            task, lease_set, limit, listed, partial(wake_name, task.app, lease_set.name, listed)
        )

    Park.release = release  # type: ignore[method-assign]


_split_release()

TASKS = {
    "single": _account_task("single", []),
    "listed": _account_task("listed", [Limit(f"shared:{RUN}", SHARED)]),
    "floor": _account_task("floor", [Limit(f"floor:{RUN}", FLOOR)]),
    "trips": _trips_task(),
    "handoff": _account_task("handoff", [Limit(f"handoff:{RUN}", FLOOR)]),
}

task_events.record_retries_and_etas(URL)
