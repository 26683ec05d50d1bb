"""The Celery scenarios with the locks on a 3-master Redis Cluster, and a worker across a
Sentinel failover.

Broker, results and the test app's recorder stay on the ordinary test Redis;
only ``redislock_url`` points at the cluster (or the Sentinel set-up), as a
team that keeps its broker and moves its locks would configure it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from celery_redislock.core.keys import LeaseKeys
from celery_redislock.enqueue.dedupe import marker_key
from devtools.engines import LocalCluster, SentinelGroup
from tests.celery.test_scenarios import (
    max_overlap,
    open_gate,
    test_per_account_cap,
    test_stampede_runs_the_body_exactly_once,
)
from tests.celery_apps.scale import create_app
from tests.celery_harness import worker_factory
from tests.waiting import wait_for

__all__ = ["test_per_account_cap", "test_stampede_runs_the_body_exactly_once"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3) as local:
        yield local


@pytest.fixture(scope="module")
def pool() -> str:
    return "prefork"


@pytest.fixture(scope="module")
def config(redis_url: str, cluster: LocalCluster) -> dict[str, str]:
    return {
        "redis": redis_url,
        "lock_redis": cluster.url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
    }


@pytest.fixture(scope="module")
def app(config: dict[str, str]) -> Any:
    return create_app(config)


@pytest.fixture(scope="module")
def worker(config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with worker_factory(tmp_path_factory.mktemp("scale-cluster")) as start:
        yield start(config, module="tests.celery_apps.scale", pool="prefork", concurrency=8)


def masters(cluster: LocalCluster) -> list[redis.Redis]:
    return [redis.Redis(port=port, socket_timeout=10) for port in cluster.master_ports()]


def test_the_worker_uses_a_cluster_client(app: Any, worker: Any) -> None:
    task = app.tasks["basic.refresh_cache"]
    assert isinstance(task.redislock_leaseset("x").client, redis.RedisCluster)


def test_stampede_with_enqueue_dedupe_on_the_cluster(
    app: Any, worker: Any, config: dict[str, str], redis_client: redis.Redis
) -> None:
    task = app.tasks["basic.refresh_dedupe"]
    lock_client = task.redislock_leaseset("x").client
    results = [task.delay(8, 120, True) for _ in range(100)]
    assert len({r.id for r in results}) == 1
    marker = marker_key(config["prefix"], "dedupe:8", task.name)
    assert lock_client.get(marker) == results[0].id.encode()
    open_gate(redis_client, config, 8)
    results[0].get(timeout=60)
    assert len(app.recorder.events("refresh_dedupe", 8)) == 2
    assert not lock_client.exists(marker)


def test_per_account_caps_with_accounts_on_every_master(
    app: Any, worker: Any, cluster: LocalCluster, config: dict[str, str]
) -> None:
    task = app.tasks["basic.sync_account"]
    lock_client = task.redislock_leaseset("x").client
    per_node: dict[str, list[str]] = {}
    for i in range(1000):  # three accounts on each master
        account = f"acct{i}-{config['prefix']}"
        holders = LeaseKeys(config["prefix"], task.redislock_name((account,), {})).holders
        accounts_there = per_node.setdefault(lock_client.get_node_from_key(holders).name, [])
        if len(accounts_there) < 3:
            accounts_there.append(account)
        if sum(map(len, per_node.values())) == 9:
            break
    assert len(per_node) == 3
    accounts = [a for there in per_node.values() for a in there]
    for node in masters(cluster):
        node.config_resetstat()
    results = [task.delay(a, n, 0.2) for a in accounts for n in range(4)]
    for result in results:
        result.get(timeout=180)
    for account in accounts:
        events = app.recorder.events("sync_account", account)
        assert sorted(e["n"] for e in events if e["what"] == "start") == [0, 1, 2, 3]
        assert max_overlap(events) <= 2, account
    for node in masters(cluster):
        assert int(node.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)) > 0
        assert not any("CROSSSLOT" in e for e in node.info("errorstats"))


# -- a worker across a Sentinel failover ---------------------------------------------


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelGroup]:
    with SentinelGroup() as group:
        yield group


def test_worker_keeps_working_across_a_sentinel_failover(
    redis_url: str, sentinels: SentinelGroup, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = {
        "redis": redis_url,
        "lock_redis": sentinels.url,
        "lock_options": json.dumps(sentinels.options),
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
    }
    app = create_app(config)
    sleeper = app.tasks["basic.sleeper"]
    with worker_factory(tmp_path_factory.mktemp("scale-sentinel")) as start:
        start(config, module="tests.celery_apps.scale", pool="prefork", concurrency=2)
        assert sleeper.delay("before", 0.01).get(timeout=60)["token"] > 0
        # Held across the failover: the replica has it, so the holder keeps it.
        long = sleeper.delay("across", 25)
        wait_for(lambda: app.recorder.events("sleeper", "across"), 60, message="'across' started")
        new_primary = sentinels.failover()
        after = sleeper.delay("after", 0.01).get(timeout=60)  # same worker, no restart
        fence = LeaseKeys(config["prefix"], after["name"]).fence
        assert redis.Redis(port=new_primary).exists(fence)
        assert long.get(timeout=90)["token"] > 0
        ends = [e for e in app.recorder.events("sleeper", "across") if e["what"] == "end"]
        assert [e["owned"] for e in ends] == [True]
