"""The benchmark modules still run and produce well-formed results (tiny runs).

Speed is not asserted here; `make bench` measures it.  What is asserted:
every contender produced numbers, our lock and semaphore behaved (FIFO
fairness, never over the limit, no market retries), the over-limit detector
fires on a semaphore that does not limit, and the seed's basic semaphore
really admits two holders of one slot when client clocks differ (its
documented flaw).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from benchmarks import common, contenders, locks, market, report, seeds, semaphores
from benchmarks import machine as machine_info
from celery_redislock.devserver import RedisServer


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def fleet() -> Iterator[common.Fleet]:
    with common.fleet(4) as f:
        yield f


@pytest.fixture(scope="module")
def results(server: RedisServer, fleet: common.Fleet) -> dict[str, Any]:
    quiet = lambda msg: None  # noqa: E731
    return {
        "mode": "tiny",
        "machine": machine_info.describe(common.client(server.url)),
        "locks": locks.run(server.url, locks.TINY, fleet, quiet),
        "semaphores": semaphores.run(server.url, semaphores.TINY, fleet, quiet),
        "market": market.run(server.url, market.TINY, fleet, quiet),
    }


def test_every_lock_contender_measured(results: dict[str, Any]) -> None:
    rows = results["locks"]["contenders"]
    assert set(rows) == set(contenders.LOCKS)
    for name, row in rows.items():
        assert row["uncontended"]["cycles_per_s"] > 0, name
        assert row["uncontended"]["client_cmds_per_acq"] >= 1, name
        assert row["fairness"]["total"] > 0, name
        assert row["fairness"]["min"] <= row["fairness"]["max"], name
    ours = rows[contenders.OURS]
    assert ours["uncontended"]["client_cmds_per_acq"] == pytest.approx(2, abs=0.1)
    # contended: acquire + at most one BLPOP + release, never polling
    assert 2 <= ours["fairness"]["client_cmds_per_acq"] <= 3.2
    assert not math.isnan(ours["handoff"]["p50_ms"])


def test_semaphores_measured_and_ours_never_over_limit(results: dict[str, Any]) -> None:
    sems = results["semaphores"]
    assert set(sems["contenders"]) == set(contenders.SEMAPHORES)
    limit = sems["params"]["limit"]
    for name, by_clients in sems["contenders"].items():
        for clients, row in by_clients.items():
            assert row["ops_per_s"] > 0, (name, clients)
            assert row["max_concurrency"] >= 1, (name, clients)
            assert row["over_limit"] == (row["max_concurrency"] > limit)
    for name in (contenders.OURS_SEM, contenders.OURS_SEM_BLOCKING):
        assert not any(row["over_limit"] for row in sems["contenders"][name].values())


def test_over_limit_detector_fires(server: RedisServer, fleet: common.Fleet) -> None:
    params = semaphores.SemaphoreParams(runs=1, limit=1, hold=0.02, seconds=0.3, margin=0.3)
    row = semaphores.measure(server.url, contenders.NO_LIMIT, 3, params, fleet)
    assert row["max_concurrency"] > 1
    assert row["over_limit"] is True


def test_seed_semaphore_admits_two_holders_with_skewed_clocks(server: RedisServer) -> None:
    conn = redis.Redis.from_url(server.url)
    first = seeds.acquire_semaphore(conn, "skew", 1, clock=lambda: 1_000_000.0)
    second = seeds.acquire_semaphore(conn, "skew", 1, clock=lambda: 999_999.99)  # 10 ms slow
    assert first is not None and second is not None  # two holders of a one-slot semaphore
    assert conn.zrank("skew", first) == 1  # the first holder was pushed out without knowing


def test_market_rows(results: dict[str, Any]) -> None:
    rows = results["market"]["rows"]
    assert {(r["sellers"], r["buyers"], r["mode"]) for r in rows} == {
        (s, b, m) for s, b in market.TINY.configs for m in market.MODES
    }
    for row in rows:
        assert row["listed"] > 0, row
        assert row["bought"] <= row["listed"], row
        if row["mode"] != market.WATCH:
            assert row["retries"] == 0, row


def test_report_and_chart(results: dict[str, Any], tmp_path: Path) -> None:
    text = report.markdown(results)
    for heading in (
        "Locks: speed",
        "Locks: fairness",
        "Semaphores",
        "market simulation",
        "Targets",
    ):
        assert heading in text
    for name in contenders.LOCKS:
        assert name in text
    report.chart(results, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_celery_part(server: RedisServer) -> None:
    from benchmarks import celery_bench

    result = celery_bench.run(server.url, celery_bench.TINY, lambda msg: None)
    throughput = result["throughput"]
    assert set(throughput) == {"plain Task", celery_bench.CONTROL, "LockedTask", "SemaphoreTask"}
    for name, row in throughput.items():
        assert row["tasks_per_s"] > 0, name
    # the guarded tasks send exactly acquire + release to the lock store
    assert throughput["plain Task"]["evalsha_per_task"] < 0.5
    assert throughput[celery_bench.CONTROL]["evalsha_per_task"] < 0.5
    assert throughput["LockedTask"]["evalsha_per_task"] == pytest.approx(2, abs=0.5)
    hb = result["heartbeat"]
    assert hb["refresh_calls"] >= 1 and hb["lost"] == 0
    assert hb["refresh_calls"] < hb["leases"]  # batched: not one call per lease
    crash = result["crash"]["celery-redislock LockedTask"]
    assert crash["free_after_s"] is not None and crash["free_after_s"] < crash["ttl_s"]


def test_left_behind_by_a_killed_holder(server: RedisServer) -> None:
    # redis-py's Lock has no TTL by default: a killed holder leaves it forever
    assert locks.left_behind(server.url, "redis-py Lock") == {
        "held": True,
        "expires_in_s": None,
        "never_expires": True,
    }
