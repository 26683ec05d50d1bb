"""The Celery app of the skewed-backlog benchmark (``benchmarks.park_bench``).

One task per contention policy, all ``SemaphoreTask`` with limit 5 on
``backlog:{run}:{account}``, and two plain tasks as controls: ``control``
(no lock; the benchmark runs it on a ``-c 5`` worker), ``relay`` (no lock;
each heavy task publishes the next heavy one when its body ends, as ``park``
promotes on release), ``parkfloor`` (the least a park can do: see
``FLOOR_ENQUEUE``) and ``parkguard`` (the least a park that keeps its core
guarantees can do: see ``GUARD_ENQUEUE``).  Configured from the environment
(``BENCH_REDIS_URL``: broker and lock Redis; ``BENCH_EVENTS_DIR``: where each
process appends its events; ``BENCH_READY_FILE``).

Events go to one file per process (``<pid>.log``, lines ``start|end|retry|eta``),
not to Redis, so the Redis command counts are the library's and the broker's;
the only Redis command a body adds is one ``INCR`` of the run's completion
counter (the benchmark subtracts it).
"""

# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

from celery import Celery

from celery_redislock import SemaphoreTask

from . import task_events
from .floors import (
    GUARD_DEADLINE_MS,
    GUARD_END,
    GUARD_ENQUEUE,
    GUARD_KEYS,
    GUARD_START,
    GUARD_TTL_MS,
)

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
LIMIT = 5
POLICIES = ("retry", "wait", "park")
TASK_SECONDS = 0.02

app = Celery("backlog", broker=URL, set_as_current=False)
app.conf.update(
    redislock_url=URL,
    redislock_prefix="backlog",
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    # The deadline covers the worst wait of a published message in the queue.
    redislock_park_deadline=120.0,
)


def _log(line: str) -> None:
    task_events.log(URL, line)


def _redis() -> Any:
    return task_events.process_state(URL)["redis"]


def _body(run: str, account: str, seq: int, sent: float) -> None:
    start = time.time()
    time.sleep(TASK_SECONDS)
    end = time.time()
    _log(f"task {run} {account} {seq} {sent:.6f} {start:.6f} {end:.6f}")
    _redis().incr(f"backlog:done:{run}")


def _task(policy: str) -> Any:
    def body(run: str, account: str, seq: int, sent: float) -> None:
        _body(run, account, seq, sent)

    body.__name__ = f"backlog_{policy}"
    return app.task(
        base=SemaphoreTask,
        name=f"backlog.{policy}",
        semaphore_key="backlog:{run}:{account}",
        semaphore_limit=LIMIT,
        lock_policy=policy,
        lock_retry_max=None,
        lock_wait_timeout=3600.0,
    )(body)


TASKS = {policy: _task(policy) for policy in POLICIES}


@app.task(name="backlog.control")
def control(run: str, account: str, seq: int, sent: float) -> None:
    _body(run, account, seq, sent)


@app.task(name="backlog.relay")
def relay(run: str, account: str, seq: int, sent: float) -> None:
    """The floor of "publish the next task when one ends": no lock, one INCR
    and one publish per completion (the benchmark seeds ``relay:next:<run>``)."""
    _body(run, account, seq, sent)
    if account == "heavy":
        following = int(_redis().incr(f"relay:next:{run}"))
        if following < int(_redis().get(f"relay:n:{run}") or 0):
            relay.apply_async((run, account, following, sent), queue=f"backlog-{run}")


# The least a park can do, as a floor for its Redis cost: a counter of running
# tasks and a list of waiting ones per account, one tiny script at publish and
# one at the end of a task, nothing else (no lease, TTL, token, Redis TIME,
# index or crash safety: a worker that dies loses its slot and its waiting
# tasks for good).  Not something to deploy; what any park pays at least.
FLOOR_ENQUEUE = """
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then
  redis.call('INCR', KEYS[1])
  return 1
end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 0
"""
FLOOR_RELEASE = """
local waiting = redis.call('LPOP', KEYS[2])
if waiting then return waiting end
redis.call('DECR', KEYS[1])
return false
"""


def _floor_keys(run: str, account: str) -> list[str]:
    return [f"parkfloor:{{{run}:{account}}}:n", f"parkfloor:{{{run}:{account}}}:q"]


@app.task(name="backlog.parkfloor")
def parkfloor(run: str, account: str, seq: int, sent: float) -> None:
    """The park floor control's task: its end publishes the account's next waiting task."""
    _body(run, account, seq, sent)
    following = _redis().eval(FLOOR_RELEASE, 2, *_floor_keys(run, account))
    if following:
        args, queue = json.loads(following)
        parkfloor.apply_async(args, queue=queue)


class _ParkFloorSender:
    """``apply_async`` of the park floor control: publish if the account has a
    free slot, else push the call on its list."""

    name = parkfloor.name

    def apply_async(self, args: Any, queue: str, producer: Any = None) -> None:
        run, account = args[0], args[1]
        payload = json.dumps([list(args), queue])
        if _redis().eval(FLOOR_ENQUEUE, 2, *_floor_keys(run, account), LIMIT, payload):
            parkfloor.apply_async(args, queue=queue, producer=producer)


def _guard_keys(run: str, account: str, task_id: str = "") -> list[str]:
    base = f"parkguard:{{{run}:{account}}}"
    return [
        *(f"{base}:{k}" for k in GUARD_KEYS),
        "parkguard:{index}",
        f"parkguard:revoked:{task_id}",
    ]


@app.task(name="backlog.parkguard", bind=True)
def parkguard(self: Any, run: str, account: str, seq: int, sent: float, token: int = 0) -> None:
    """The guarded park floor's task: its start presents its token, its end
    promotes the account's next waiting task (an owner of its own: the task id)."""
    keys, owner = _guard_keys(run, account, self.request.id), self.request.id
    if _redis().eval(GUARD_START, 7, *keys, owner, token, owner, GUARD_TTL_MS) != 1:
        return  # a stale copy, or revoked: not run
    _body(run, account, seq, sent)
    following = _redis().eval(
        GUARD_END, 7, *keys, owner, LIMIT, GUARD_DEADLINE_MS, f"{run}:{account}"
    )
    if following:
        next_token, payload = following
        task_id, args, queue = json.loads(payload)
        parkguard.apply_async([*args, int(next_token)], queue=queue, task_id=task_id)


class _ParkGuardSender:
    """``apply_async`` of the guarded park floor: reserve and publish with the
    token if the account has a free slot, else park the call."""

    name = parkguard.name

    def apply_async(self, args: Any, queue: str, producer: Any = None) -> None:
        run, account = args[0], args[1]
        task_id = uuid.uuid4().hex
        payload = json.dumps([task_id, list(args), queue])
        token = _redis().eval(
            GUARD_ENQUEUE,
            7,
            *_guard_keys(run, account),
            task_id,
            LIMIT,
            payload,
            GUARD_DEADLINE_MS,
            f"{run}:{account}",
        )
        if int(token) > 0:
            parkguard.apply_async(
                [*args, int(token)], queue=queue, producer=producer, task_id=task_id
            )


TASKS.update(
    control=control, relay=relay, parkfloor=_ParkFloorSender(), parkguard=_ParkGuardSender()
)

task_events.record_retries_and_etas(URL)
