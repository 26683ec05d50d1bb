"""The two scenarios users asked for, on prefork and threads pools.

* stampede: 100 ``refresh_cache(7)`` at once, the body runs exactly once, the
  others end ``SKIPPED``; with enqueue de-duplication only one message is
  published at all;
* per-account cap: 60 tasks for 3 accounts, limit 2, concurrency 8: never
  more than 2 per account at once (from the task bodies' own records), every
  task runs exactly once, and small accounts are not stuck behind a big one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from celery_redislock import SKIPPED
from celery_redislock.enqueue.dedupe import marker_key
from tests.celery_apps.basic import create_app
from tests.celery_harness import worker_factory
from tests.waiting import wait_for


@pytest.fixture(scope="module", params=["prefork", "threads"])
def pool(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def config(redis_url: str, pool: str) -> dict[str, str]:
    return {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", "ttl": "30"}


@pytest.fixture(scope="module")
def app(config: dict[str, str]) -> Any:
    return create_app(config)


@pytest.fixture(scope="module")
def worker(
    config: dict[str, str], pool: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    with worker_factory(tmp_path_factory.mktemp(f"scenarios-{pool}")) as start:
        yield start(config, pool=pool, concurrency=8)


def open_gate(client: redis.Redis, config: dict[str, str], key: object) -> None:
    client.set(f"{config['prefix']}:gate:{key}", 1, ex=600)


def test_stampede_runs_the_body_exactly_once(
    app: Any, worker: Any, config: dict[str, str], redis_client: redis.Redis
) -> None:
    task = app.tasks["basic.refresh_cache"]
    results = [task.delay(7, 120, True) for _ in range(100)]
    # The one that runs holds the lock until the gate opens: every other one
    # meets it, whatever the machine's speed.
    wait_for(
        lambda: sum(r.state == SKIPPED for r in results) == 99,
        120,
        message="99 duplicates SKIPPED",
    )
    open_gate(redis_client, config, 7)
    [ran] = [r for r in results if r.state != SKIPPED]
    ran.get(timeout=60)
    starts = [e for e in app.recorder.events("refresh_cache", 7) if e["what"] == "start"]
    assert [e["id"] for e in starts] == [ran.id]
    assert task.redislock_leaseset(task.redislock_name((7,), {})).holders() == []


def test_stampede_with_enqueue_dedupe_publishes_one_message(
    app: Any, worker: Any, config: dict[str, str], redis_client: redis.Redis
) -> None:
    task = app.tasks["basic.refresh_dedupe"]
    results = [task.delay(8, 120, True) for _ in range(100)]
    assert len({r.id for r in results}) == 1  # 99 calls returned the first message's result
    marker = marker_key(config["prefix"], "dedupe:8", task.name)
    assert redis_client.get(marker) == results[0].id.encode()
    open_gate(redis_client, config, 8)
    results[0].get(timeout=60)
    assert len(app.recorder.events("refresh_dedupe", 8)) == 2  # one start, one end
    assert not redis_client.exists(marker)  # cleared when the task finished
    again = task.delay(8, 0.01)  # so a later call is published and runs
    assert again.id != results[0].id
    again.get(timeout=60)


def max_overlap(events: list[dict[str, Any]]) -> int:
    """Most bodies running at once, from their own start/end records."""
    points = sorted((e["t"], 1 if e["what"] == "start" else -1) for e in events)
    running = peak = 0
    for _, delta in points:
        running += delta
        peak = max(peak, running)
    return peak


def test_per_account_cap(app: Any, worker: Any) -> None:
    task = app.tasks["basic.sync_account"]
    counts = {"big": 50, "small1": 5, "small2": 5}
    results = [task.delay(f"big-{app.conf.redislock_prefix}", n) for n in range(counts["big"])]
    for n in range(counts["small1"]):
        results.append(task.delay(f"small1-{app.conf.redislock_prefix}", n))
        results.append(task.delay(f"small2-{app.conf.redislock_prefix}", n))
    for result in results:
        result.get(timeout=180)

    ends: dict[str, list[float]] = {}
    for account, count in counts.items():
        events = app.recorder.events("sync_account", f"{account}-{app.conf.redislock_prefix}")
        starts = [e for e in events if e["what"] == "start"]
        # every task ran exactly once
        assert sorted(e["n"] for e in starts) == list(range(count))
        assert len({e["id"] for e in starts}) == count
        assert max_overlap(events) <= 2, account
        ends[account] = sorted(e["t"] for e in events if e["what"] == "end")
    assert max_overlap(app.recorder.events("sync_account", f"big-{app.conf.redislock_prefix}")) == 2
    # The small accounts were served while the big one's backlog waited: they
    # were done before half of the big account's tasks were.
    half_of_big = ends["big"][len(ends["big"]) // 2]
    assert max(ends["small1"] + ends["small2"]) < half_of_big
