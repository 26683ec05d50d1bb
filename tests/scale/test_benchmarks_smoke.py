"""The benchmark modules still run and produce well-formed results (tiny runs).

Speed is not asserted here; `make bench` measures it.  What is asserted:
every contender produced numbers, our lock and semaphore behaved (FIFO
fairness, never over the limit, no market retries), the over-limit detector
fires on a semaphore that does not limit, and Redis in Action's basic semaphore
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

from benchmarks import (
    common,
    contenders,
    locks,
    market,
    redis_cost,
    redis_in_action,
    report,
    semaphores,
)
from benchmarks import machine as machine_info
from celery_redislock.testing.servers import RedisServer


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


def test_book_semaphore_admits_two_holders_with_skewed_clocks(server: RedisServer) -> None:
    conn = redis.Redis.from_url(server.url)
    first = redis_in_action.acquire_semaphore(conn, "skew", 1, clock=lambda: 1_000_000.0)
    second = redis_in_action.acquire_semaphore(
        conn, "skew", 1, clock=lambda: 999_999.99
    )  # 10 ms slow
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


def test_redis_cost_part_measures_every_contender_and_the_floors(server: RedisServer) -> None:
    tiny = redis_cost.CostParams(cycles=40, slices=2, threads=2, contended=40)
    cost = redis_cost.run(server.url, tiny, lambda msg: None)
    rows = cost["uncontended"]
    assert {
        "redis-py Lock",
        "ours RedisLock",
        "ours FairSemaphore(5)",
        "control: two PINGs",
        "floor: our guarantees, holders in one hash",
    } <= set(rows)
    for name, row in rows.items():
        assert row["cycles"] == 40, name
        assert row["redis_cpu_us"] >= 0 and row["cycles_per_s"] > 0, (name, row)
    # The guaranteed floor does what it claims: TIME, the queue check, the fence.
    floor = rows["floor: our guarantees, holders in one hash"]["calls_per_cycle"]
    assert floor["time"] == 1 and floor["exists"] == 2 and floor["set"] == 1
    assert cost["contended"]["acquisitions"] == 40
    text = redis_cost.section(cost)
    assert "| ours RedisLock |" in text and "Contended (2 threads" in text


def test_celery_part(server: RedisServer) -> None:
    from benchmarks import celery_bench

    result = celery_bench.run(server.url, celery_bench.TINY, lambda msg: None)
    throughput = result["throughput"]
    assert set(throughput) == {"plain Task", celery_bench.CONTROL, "LockedTask", "SemaphoreTask"}
    for name, row in throughput.items():
        assert row["tasks_per_s"] > 0, name
    # the guarded tasks send exactly acquire + release to the lock store
    assert throughput["plain Task"]["script_calls_per_task"] < 0.5
    assert throughput[celery_bench.CONTROL]["script_calls_per_task"] < 0.5
    assert throughput["LockedTask"]["script_calls_per_task"] == pytest.approx(2, abs=0.5)
    calls = result["calls"]["rows"]
    assert set(calls) == {
        "plain Task",
        celery_bench.CALL_CONTROL_LOCK,
        celery_bench.CALL_FLOOR_LOCK,
        celery_bench.CALL_LOCKED,
        celery_bench.CALL_CONTROL_PARK,
        celery_bench.CALL_FLOOR_PARK,
        celery_bench.CALL_PARK,
    }
    assert all(row["calls_per_s"] > 0 for row in calls.values())
    # a key per call: a lock's acquire and release; the park's enqueue, claim and release
    assert calls[celery_bench.CALL_LOCKED]["script_calls_per_task"] == pytest.approx(2, abs=0.5)
    assert calls[celery_bench.CALL_PARK]["script_calls_per_task"] >= 2.5
    assert calls[celery_bench.CALL_CONTROL_PARK]["script_calls_per_task"] < 0.5
    # the floors run their own scripts: two in the worker, and the park's one in the caller
    assert calls[celery_bench.CALL_FLOOR_LOCK]["script_calls_per_task"] == pytest.approx(2, abs=0.5)
    assert calls[celery_bench.CALL_FLOOR_PARK]["script_calls_per_task"] == pytest.approx(3, abs=0.5)
    assert "a key per call" in report.celery_section(result)
    assert "the guarded park's floor" in report.celery_section(result)
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


def test_backlog_scenario_reports_every_field(server: RedisServer) -> None:
    """The skewed-backlog part runs every policy and reports each figure (not timings)."""
    from benchmarks import park_bench

    backlog = park_bench.run(server.url, park_bench.TINY, lambda msg: None)
    rows = backlog["runs"]
    assert [(r["policy"], r["n"]) for r in rows] == [
        (p, n) for n in park_bench.TINY.sizes for p in park_bench.TINY.policies
    ]
    light = park_bench.TINY.light_accounts * park_bench.TINY.light_jobs
    for row in rows:
        assert "incomplete" not in row, row
        assert (row["heavy_ran"], row["heavy_distinct"], row["light_ran"]) == (
            row["n"],
            row["n"],
            light,
        )
        for field in (
            "heavy_mean_concurrency",
            "heavy_span_s",
            "heavy_span_vs_ideal",
            "light_p50_s",
            "light_p99_s",
            "fifo_inversions_pct",
            "idle_rss_mb",
            "peak_rss_mb",
            "redis_cmds_per_task",
            "redis_bytes_per_waiting_task",
            "redis_cpu_us_per_task",
            "idle_cmds_per_s",
        ):
            assert isinstance(row[field], float) and math.isfinite(row[field]), (field, row)
        assert row["heavy_mean_concurrency"] <= park_bench.LIMIT + 0.01
        assert row["max_queue"] >= row["heavy_in_broker"] >= 1
    assert {r["policy"] for r in rows if r.get("control")} == {
        "control",
        "relay",
        "parkfloor",
        "parkguard",
    }
    [park] = [r for r in rows if r["policy"] == "park"]
    # Behaviour, not speed: park publishes at most the limit and never requeues.
    assert park["heavy_in_broker"] <= park_bench.LIMIT
    assert (park["requeues"], park["eta_messages"]) == (0, 0)
    assert set(park["targets"]) >= {"heavy >= 0.9 x limit", "FIFO inversions <= 2 %"}
    text = park_bench.section(backlog)
    assert "Skewed backlog" in text and "`park`" in text and "Targets of `park`" in text
    assert "against the relay" in text and "| `park` |" in text
    machine = machine_info.describe(common.client(server.url))
    assert text in report.markdown({"mode": "tiny", "machine": machine, "backlog": backlog})


def test_rate_part_reports_every_contender_and_the_primitive(server: RedisServer) -> None:
    """Each contender of part ``rate`` runs every task once; ``park`` never
    requeues or holds an ETA message and never lets a key start more than
    its rate plus its burst in a second; the recipe it replaces requeues."""
    from benchmarks import rate_bench

    result = rate_bench.run(server.url, rate_bench.TINY, lambda msg: None)
    rows = {row["contender"]: row for row in result["runs"]}
    assert set(rows) == set(rate_bench.CONTENDERS)
    light = rate_bench.TINY.light_keys * rate_bench.TINY.light_jobs
    for row in rows.values():
        assert "incomplete" not in row, row
        assert (row["heavy_ran"], row["light_ran"]) == (rate_bench.TINY.n, light)
        assert row["redis_cmds_per_task"] > 0 and row["heavy_rate"] > 0
    park = rows["park"]
    assert (park["requeues"], park["eta_messages"]) == (0, 0)
    assert park["max_starts_per_key_in_1s"] <= rate_bench.TINY.rate + 1
    assert set(park["targets"]) and rows["retry"]["requeues"] > 0
    prim = result["primitive"]
    assert prim["RateLimiter.try_acquire (GCRA)"]["redis_cmds_per_call"] >= 1
    assert "limits moving window" in prim
    assert "| `park` |" in rate_bench.section(result)


def test_limits_part_runs_every_task_once_within_both_limits(server: RedisServer) -> None:
    """Part ``limits`` on a tiny backlog: each contender runs every task
    once; ``listed`` never has more runs at once than its shared limit, nor
    one account more than 3, and its targets are reported."""
    from benchmarks import limits_bench

    params = limits_bench.TINY
    result = limits_bench.run(server.url, params, lambda msg: None)
    rows = {row["contender"]: row for row in result["runs"]}
    assert set(rows) == set(limits_bench.CONTENDERS)
    total = params.accounts * params.backlog + params.light_accounts * params.light_jobs
    for row in rows.values():
        assert "incomplete" not in row, row
        assert row["ran"] == total and row["redis_cmds_per_task"] > 0
        assert row["most_of_one_account"] <= 3
    assert rows["listed"]["most_at_once"] <= params.shared
    assert result["targets"]["0 over-limit (any key, every round)"]
    assert "| listed |" in limits_bench.section(result)


def test_coalesce_part_leaves_nothing_stale_with_keep_latest(server: RedisServer) -> None:
    """Part ``coalesce`` on a tiny schedule: every call of every policy settles,
    ``keep_latest`` and debounce leave no key stale, debounce runs once per
    burst and reports each run's lateness."""
    from benchmarks import coalesce_bench

    tiny = coalesce_bench.CoalesceParams(keys=2, bursts=1, burst=3, spread=1.0)
    result = coalesce_bench.run(server.url, tiny, lambda msg: None)
    assert result["keep_latest"]["stale_keys"] == result["debounce"]["stale_keys"] == 0
    assert result["debounce"]["runs"] == 2 and result["debounce"]["late_ms"]["n"] == 2
    assert result["skip"]["runs"] >= 2
    assert "| debounce |" in coalesce_bench.section(result)


def test_park_scripts_cycle_times_each_script(server: RedisServer) -> None:
    """``benchmarks.park_scripts`` runs the whole park cycle (every task enqueued,
    claimed and released) and reports a Redis-measured time for each script."""
    from benchmarks import park_scripts

    times = park_scripts.cycle(server.url, 3, 12)
    assert set(times) == set(park_scripts.PHASES)
    assert all(math.isfinite(t) and t > 0 for t in times.values()), times


def test_helper_profile_times_the_park_cycle_by_helper(server: RedisServer) -> None:
    """``benchmarks.helper_profile`` names the helpers of the park cycle with
    their self time and calls, then leaves the server and the package with
    the plain library; without Redis Functions it says it needs them."""
    import redis

    from benchmarks import helper_profile
    from celery_redislock.core import scripts

    plain = scripts.LIBRARY.text
    client = redis.Redis.from_url(server.url)
    if int(str(client.info("server")["redis_version"]).split(".")[0]) < 7:
        with pytest.raises(RuntimeError, match="needs Redis Functions"):
            helper_profile.profile(server.url, 2, 10)
        return
    found = helper_profile.profile(server.url, 2, 20)
    helpers = found["helpers"]
    assert {"promote_parked", "next_due", "add_holder", "reserve"} <= set(helpers), helpers
    # each of the 20 tasks is reserved once (2 at enqueue, 18 by promotion)
    assert helpers["reserve"][1] == 1.0, helpers["reserve"]
    assert found["probed_us_per_task"] > found["script_us_per_task"] > 0
    assert sum(us for us, _ in helpers.values()) <= found["probed_us_per_task"]
    assert scripts.LIBRARY.text == plain
    assert (
        client.function_list() == []
    )  # the probed library is gone: the next call loads the plain one


def test_script_prologue_cuts_each_shipped_script_where_its_own_code_begins(
    server: RedisServer,
) -> None:
    """Each cut keeps the included helpers and none of the script's own body,
    and Redis runs it with the KEYS and ARGV its callers pass (by FCALL too,
    as a function of the cut library, where the server has functions)."""
    from benchmarks import script_prologue
    from celery_redislock.core import scripts

    client = common.client(server.url)
    library = script_prologue.prologue_library()
    functions = int(str(client.info("server")["redis_version"]).split(".")[0]) >= 7
    if functions:
        client.function_load(library.text, replace=True)
    for name, (keys, args) in script_prologue.SHIPPED.items():
        if functions:
            function = library.function(name)
            assert script_prologue.per_call(client, "", keys, args, 5, function) > 0
        cut = script_prologue.prologue(name)
        whole = getattr(scripts, name.removesuffix(".lua").upper()).source
        assert cut.endswith("return 1\n") and whole.startswith(cut.removesuffix("return 1\n"))
        assert len(cut) < len(whole)
        assert script_prologue.per_call(client, cut, keys, args, 5) > 0
