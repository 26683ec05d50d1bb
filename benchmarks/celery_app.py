"""The Celery app the benchmark's ``celery worker`` subprocess runs.

Configured from the environment (``BENCH_REDIS_URL``, ``BENCH_READY_FILE``,
``BENCH_BROKER_URL``, ``BENCH_METRICS_PORT``): Redis is the lock store, and the broker too unless
``BENCH_BROKER_URL`` names another (RabbitMQ).  No-op tasks count their completions
with one INCR (the same for every variant) and stamp the first and last.
"""

# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import redis
from celery import Celery
from celery_once import QueueOnce  # type: ignore[import-untyped]
from celery_singleton import Singleton  # type: ignore[import-untyped]

from celery_redislock import LockedTask, SemaphoreTask

from . import floors, task_events

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
BROKER_URL = os.environ.get("BENCH_BROKER_URL") or URL
CRASH_TTL = 30.0

app = Celery("bench", broker=BROKER_URL, set_as_current=False)
app.conf.update(
    redislock_url=URL,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    singleton_backend_url=URL,
    ONCE={"backend": "celery_once.backends.Redis", "settings": {"url": URL}},
    # BENCH_METRICS_PORT: the worker serves Prometheus metrics (part "metrics")
    redislock_metrics_port=int(os.environ["BENCH_METRICS_PORT"])
    if os.environ.get("BENCH_METRICS_PORT")
    else None,
    redislock_metrics_host="127.0.0.1",
)


def conn() -> redis.Redis:
    return task_events.client(URL)


def _done(counter: str, n: int) -> None:
    r = conn()
    count = r.incr(counter)
    if count == 1:
        r.set(counter + ":first", repr(time.time()))
    elif count == n:
        r.set(counter + ":last", repr(time.time()))


@app.task(name="bench.plain")
def plain(x: int, counter: str, n: int) -> None:
    _done(counter, n)


@app.task(name="bench.two_pings")
def two_pings(x: int, counter: str, n: int) -> None:
    """A plain task plus two bare round trips to Redis: the floor of any task
    that talks to Redis before and after its body (the control row)."""
    r = conn()
    r.ping()
    r.ping()
    _done(counter, n)


@app.task(base=LockedTask, lock_key="bench:k:{x}", name="bench.locked")
def locked(x: int, counter: str, n: int) -> None:
    _done(counter, n)


@app.task(base=SemaphoreTask, semaphore_key="bench:sem", semaphore_limit=4, name="bench.sem")
def sem(x: int, counter: str, n: int) -> None:
    _done(counter, n)


@app.task(base=SemaphoreTask, semaphore_key="bench:s:{x}", semaphore_limit=1, name="bench.sem_one")
def sem_one(x: int, counter: str, n: int) -> None:
    """A SemaphoreTask under ``park`` (its default) whose every call has a key
    of its own: what each call pays for the park, nothing contended."""
    _done(counter, n)


def _floor_script(text: str) -> Any:
    """``text`` registered with this process's client: called by ``EVALSHA``, as ours are."""
    scripts = _floor_scripts.setdefault(os.getpid(), {})
    if text not in scripts:
        scripts[text] = conn().register_script(text)
    return scripts[text]


_floor_scripts: dict[int, dict[str, Any]] = {}
FLOOR_TTL_MS = 60_000


@app.task(name="bench.floor_locked", bind=True)
def floor_locked(self: Any, x: int, counter: str, n: int) -> None:
    """A plain task whose body runs inside the guaranteed floor's acquire and
    release (``floors.GUARANTEED_ACQ``/``_REL``), a key per call: what a lock
    keeping our guarantees would cost with no library code around it."""
    keys = [f"bench:floor:{{{x}}}:{part}" for part in ("holders", "fence", "queue")]
    owner = self.request.id
    meta = f"{owner}|{self.request.hostname}|{os.getpid()}"
    if not _floor_script(floors.GUARANTEED_ACQ)(keys, [owner, FLOOR_TTL_MS, meta]):
        raise RuntimeError(f"floor lock {x} taken")
    _done(counter, n)
    _floor_script(floors.GUARANTEED_REL)([keys[0], keys[2]], [owner])  # holders, queue


def _guard_keys(x: int, task_id: str) -> list[str]:
    base = f"bench:guard:{{{x}}}"
    return [
        *(f"{base}:{part}" for part in floors.GUARD_KEYS),
        "bench:guard:{index}",
        f"bench:guard:revoked:{task_id}",
    ]


@app.task(name="bench.floor_parked", bind=True)
def floor_parked(self: Any, x: int, counter: str, n: int, token: int = 0) -> None:
    """The guarded park floor's start and end (``floors.GUARD_START``/``_END``)
    around a plain body, a key per call (nothing is ever parked)."""
    keys, owner = _guard_keys(x, self.request.id), self.request.id
    start = [owner, token, owner, floors.GUARD_TTL_MS]
    if _floor_script(floors.GUARD_START)(keys, start) != 1:
        raise RuntimeError(f"floor park {x}: stale or revoked")
    _done(counter, n)
    end = [owner, 1, floors.GUARD_DEADLINE_MS, str(x)]
    if _floor_script(floors.GUARD_END)(keys, end):
        raise RuntimeError(f"floor park {x}: a call was parked behind a key of its own")


class FloorParkSender:
    """``apply_async`` of ``floor_parked``: the guarded park floor's enqueue
    (``floors.GUARD_ENQUEUE``) in the caller, then the publish with its token."""

    name = floor_parked.name

    def apply_async(self, args: Any, queue: str, producer: Any = None) -> None:
        task_id = uuid.uuid4().hex
        payload = json.dumps([task_id, list(args), queue])
        enqueue = [task_id, 1, payload, floors.GUARD_DEADLINE_MS, str(args[0])]
        token = int(_floor_script(floors.GUARD_ENQUEUE)(_guard_keys(args[0], ""), enqueue))
        if token <= 0:
            raise RuntimeError(f"floor park {args[0]}: not reserved ({token})")
        floor_parked.apply_async([*args, token], queue=queue, producer=producer, task_id=task_id)


floor_park_sender = FloorParkSender()


def _hang(x: str) -> None:
    conn().set(f"bench:crashpid:{x}", os.getpid())
    time.sleep(600)


@app.task(base=LockedTask, lock_key="bench:crash:{x}", lock_ttl=CRASH_TTL, name="bench.crash_ours")
def crash_ours(x: str) -> None:
    _hang(x)


@app.task(base=QueueOnce, once={"keys": ["x"]}, name="bench.crash_once")
def crash_once(x: str) -> None:
    _hang(x)


@app.task(base=Singleton, name="bench.crash_singleton")
def crash_singleton(x: str) -> None:
    _hang(x)


task_events.announce_ready()
