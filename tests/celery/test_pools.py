"""Renewal that a busy task body cannot stop, under every Celery pool.

Scenario (issue 14, item 9): a guarded task with a 1 s lease keeps its process
busy for 3 s, while another process tries to take the same key every 0.1 s.
Any success before the body's ``end`` event is an overlap: exclusion broke.

Bodies: a pure-Python loop (``py``) and ONE C call holding the GIL for the
whole time (``c``: ``sum(range(n))`` calibrated in the worker).  Real
``celery worker`` processes (tests/celery_harness.py, app
tests/celery_apps/pools.py).

``python -m tests.celery.test_pools [ROUNDS]`` prints the table of
docs/pools.md (every pool x body x task kind, ROUNDS runs each).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from celery_redislock import HEARTBEAT, FairSemaphore, RedisLock
from celery_redislock.core.scripts import REFRESH_PREFIX
from tests.celery_apps.pools import create_app
from tests.celery_harness import WorkerProcess, worker_factory
from tests.waiting import wait_for

LEASE = 1.0
BUSY = 3.0
TRY_EVERY = 0.1
TASKS = {"lock": "pools.busy_lock", "semaphore": "pools.busy_slot"}
CONCURRENCY = {"prefork": 1, "solo": 1, "threads": 2, "gevent": 2, "eventlet": 2}


@dataclass
class Outcome:
    """What one run saw."""

    overlaps: int  # contender acquisitions while the body ran
    attempts: int
    owned_at_end: bool
    lost_signals: int
    c_call: float  # seconds the C call took (0 for other bodies)

    @property
    def held(self) -> bool:
        return self.overlaps == 0 and self.owned_at_end and self.lost_signals == 0


def make_config(redis_url: str) -> dict[str, str]:
    return {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", "lease": str(LEASE)}


def measure_config(redis_url: str) -> dict[str, str]:
    """As make_config, with gevent/eventlet allowed, to measure what they would do."""
    return {**make_config(redis_url), "allow_green": "1"}


def start_pool_worker(start: Any, config: dict[str, str], pool: str) -> WorkerProcess:
    worker: WorkerProcess = start(
        config, module="tests.celery_apps.pools", pool=pool, concurrency=CONCURRENCY[pool]
    )
    return worker


def run_once(
    app: Any, client: Any, config: dict[str, str], kind: str, mode: str, seconds: float = BUSY
) -> Outcome:
    """Send one busy task and contend for its key until its body ends."""
    prefix = config["prefix"]
    key = uuid.uuid4().hex[:8]
    name = f"busy:{key}"
    contender: RedisLock | FairSemaphore = (
        RedisLock(client, name, ttl=LEASE, prefix=prefix)
        if kind == "lock"
        else FairSemaphore(client, name, 1, ttl=LEASE, prefix=prefix)
    )
    result = app.tasks[TASKS[kind]].apply_async((key, seconds, mode))
    events_key = f"{prefix}:rec:{key}"

    def events(what: str) -> list[dict[str, Any]]:
        return [e for e in map(json.loads, client.lrange(events_key, 0, -1)) if e["what"] == what]

    deadline = time.monotonic() + 90
    while not events("start"):
        assert time.monotonic() < deadline, "the busy task never started"
        assert not result.ready(), f"task ended without starting: {result.result!r}"
        time.sleep(0.02)
    overlaps = attempts = 0
    while not events("end"):
        assert time.monotonic() < deadline, "the busy body never ended"
        attempts += 1
        if contender.acquire(blocking=False):
            acquired_at = time.time()
            contender.release()
            ends = events("end")
            if not ends or acquired_at < ends[0]["t"]:
                overlaps += 1
        time.sleep(TRY_EVERY)  # the contender's pace, not a wait for a condition
    owned = result.get(timeout=90)
    end = events("end")[0]
    lost = [json.loads(e) for e in client.lrange(f"{prefix}:lost", 0, -1)]
    client.delete(f"{prefix}:lost")
    return Outcome(overlaps, attempts, bool(owned), len(lost), float(end["c_call"]))


def _renew_by_prefix(client: Any, lock: Any, *prefixes: str) -> list[int]:
    keys = lock.keys
    return [int(x) for x in REFRESH_PREFIX(client, [keys.holders, keys.info], list(prefixes))]


def test_refresh_prefix_renews_live_matching_holders_and_never_revives(
    redis_client: Any, prefix: str
) -> None:
    """refresh_prefix.lua: only holders with the prefix, each by its own ttl, never revived."""
    mine = FairSemaphore(redis_client, "rp", 2, ttl=1.0, prefix=prefix, owner_prefix="t1.h.42.")
    other = FairSemaphore(redis_client, "rp", 2, ttl=1.0, prefix=prefix, owner_prefix="t2.h.43.")
    assert mine.acquire(blocking=False) and other.acquire(blocking=False)
    for held in (mine, other):  # nobody in this process renews them
        assert held.lease is not None
        HEARTBEAT.discard(held.lease)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # renew "mine" from outside, well within its ttl
        assert _renew_by_prefix(redis_client, mine, "t1.h.42.", "nomatch.") == [1, 1000]
        time.sleep(0.2)
    owners = [h.owner for h in mine.holders()]
    assert len(owners) == 1 and owners[0].startswith("t1.h.42."), owners
    assert mine.owned()  # past its local deadline, but renewed by another: still owned
    assert not other.owned()
    wait_for(lambda: not mine.holders(), timeout=10, message="the unrenewed lease to expire")
    assert _renew_by_prefix(redis_client, mine, "t1.h.42.") == [0, 0]
    assert mine.holders() == []  # an expired lease is not revived


def test_lease_renewed_by_another_process_is_not_reported_lost(
    redis_client: Any, prefix: str
) -> None:
    """The local deadline passes while another process renews: owned() asks Redis first."""
    lost: list[Any] = []
    lock = RedisLock(
        redis_client,
        "rp-hb",
        ttl=0.6,
        prefix=prefix,
        owner_prefix="t3.h.44.",
        on_lost=lost.append,
    )
    assert lock.acquire(blocking=False)
    lease = lock.lease
    assert lease is not None
    # This process stops renewing (as if its heartbeat could not run), another renews.
    HEARTBEAT.discard(lease)
    lease.valid_until = time.monotonic() - 0.01
    for _ in range(6):
        assert _renew_by_prefix(redis_client, lock, "t3.h.44.")[0] == 1
        time.sleep(0.1)
    assert lock.owned()
    assert lost == []
    lock.release()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    with worker_factory(tmp_path) as start:
        yield start


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    c = redis.Redis.from_url(redis_url, socket_timeout=10)
    yield c
    c.close()


HOLDS = [
    ("prefork", "py"),
    ("prefork", "c"),
    ("threads", "py"),
    ("solo", "py"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("pool", "mode"), HOLDS)
def test_busy_body_keeps_its_lease(
    start: Any, client: Any, redis_url: str, pool: str, mode: str
) -> None:
    """The lease survives a body busy for 3x its ttl: no overlap, no loss reported."""
    config = make_config(redis_url)
    start_pool_worker(start, config, pool)
    app = create_app(config)
    for kind in TASKS:
        outcome = run_once(app, client, config, kind, mode)
        assert outcome.attempts >= 5, outcome  # the contender really tried during the body
        assert outcome.overlaps == 0, (pool, mode, kind, outcome)
        assert outcome.owned_at_end, (pool, mode, kind, outcome)
        assert outcome.lost_signals == 0, (pool, mode, kind, outcome)
        if mode == "c":
            assert outcome.c_call > 1.5 * LEASE, outcome  # the C call outlasted the lease


@pytest.mark.parametrize("pool", ["gevent", "eventlet"])
def test_green_pool_is_refused_at_worker_start(start: Any, redis_url: str, pool: str) -> None:
    """gevent/eventlet cannot renew during a body that does not yield: the worker refuses."""
    config = make_config(redis_url)
    with pytest.raises(RuntimeError, match="exited early") as failed:
        start_pool_worker(start, config, pool)
    assert (
        f"celery-redislock: the {pool} pool cannot renew leases while a task body runs "
        "without yielding" in str(failed.value)
    )
    assert "use -P prefork (or threads)" in str(failed.value)


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["gevent", "eventlet"])
def test_green_pool_allowed_for_yielding_bodies(
    start: Any, client: Any, redis_url: str, pool: str
) -> None:
    """Opted in (``redislock_allow_green_pool``), a body that yields keeps its lease."""
    config = {**make_config(redis_url), "allow_green": "1"}
    start_pool_worker(start, config, pool)
    app = create_app(config)
    for kind in TASKS:
        outcome = run_once(app, client, config, kind, "sleep")
        assert outcome.attempts >= 5, outcome
        assert outcome.held, (pool, kind, outcome)


def measure(rounds: int) -> None:
    """Print the docs/pools.md table: every pool x body x task kind, ``rounds`` runs each."""
    from celery_redislock.testing import servers

    pools = ["prefork", "threads", "solo", "gevent", "eventlet"]
    modes = ["py", "c", "sleep"]
    print(f"lease {LEASE} s, body busy {BUSY} s, contender every {TRY_EVERY} s, {rounds} runs")
    print("| pool | body | task | runs held | overlaps / attempts | loss reported | C call (s) |")
    print("|---|---|---|---|---|---|---|")
    with servers.redis_url() as url, tempfile.TemporaryDirectory() as tmp:
        c = redis.Redis.from_url(url, socket_timeout=10)
        for pool in pools:
            with worker_factory(Path(tmp)) as start_worker:
                config = measure_config(url)
                start_pool_worker(start_worker, config, pool)
                app = create_app(config)
                for mode in modes:
                    for kind in TASKS:
                        runs = [run_once(app, c, config, kind, mode) for _ in range(rounds)]
                        held = sum(r.held for r in runs)
                        overlaps = sum(r.overlaps for r in runs)
                        attempts = sum(r.attempts for r in runs)
                        lost = sum(r.lost_signals > 0 or not r.owned_at_end for r in runs)
                        calls = [r.c_call for r in runs if r.c_call]
                        took = f"{min(calls):.1f}-{max(calls):.1f}" if calls else "-"
                        print(
                            f"| {pool} | {mode} | {kind} | {held}/{rounds} | "
                            f"{overlaps}/{attempts} | {lost}/{rounds} | {took} |",
                            flush=True,
                        )


if __name__ == "__main__":
    measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
