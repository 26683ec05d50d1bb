"""Sentinel (a primary, a replica, three sentinels): replica acknowledgement, a forced failover."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from celery_redislock import Lease, NotReplicated, RedisLock
from celery_redislock.core.connection import client_from_url
from devtools.engines import SentinelGroup
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    with SentinelGroup() as sentinels:
        yield sentinels


@pytest.fixture
def client(group: SentinelGroup) -> Iterator[Any]:
    cl = client_from_url(group.url, group.options)
    yield cl
    cl.close()


def test_the_sentinel_url_reaches_the_primary(group: SentinelGroup, client: Any) -> None:
    assert client.connection_pool.service_name == group.master_name
    client.ping()
    role = client.execute_command("ROLE")
    assert role[0] == b"master"
    with pytest.raises(ValueError, match="needs the option master_name"):
        client_from_url(group.url)


def test_replica_acknowledgement_on_acquire(client: Any, prefix: str) -> None:
    lock = RedisLock(client, "acked", prefix=prefix, replicas=1, replica_timeout=5)
    assert lock.acquire()
    lock.release()
    # Two replicas cannot acknowledge: there is one.  The lease is given back.
    greedy = RedisLock(client, "acked", prefix=prefix, replicas=2, replica_timeout=0.1)
    with pytest.raises(NotReplicated, match="only 1 of the 2 replicas"):
        greedy.acquire()
    assert greedy.lease is None and not greedy.locked()
    after = RedisLock(client, "acked", prefix=prefix)
    assert after.acquire(blocking=False)
    after.release()


def test_replica_acknowledgement_after_a_hand_off(client: Any, prefix: str) -> None:
    holder = RedisLock(client, "handed", prefix=prefix)
    assert holder.acquire()
    waiter = RedisLock(client, "handed", prefix=prefix, replicas=1, replica_timeout=5)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=30)))
    thread.start()
    wait_for(lambda: holder.waiters(), 10, message="the waiter to queue")
    holder.release()
    thread.join(30)
    assert got == [True] and waiter.owned()
    waiter.release()


def test_forced_failover_keeps_replicated_leases_and_reports_lost_ones(
    group: SentinelGroup, client: Any, prefix: str
) -> None:
    """SENTINEL FAILOVER while two locks are held.

    ``kept`` reached the replica (``replicas=1`` made sure); ``dropped`` is
    deleted on the replica before the failover, as if replication had lagged.
    After the failover the same client object (no restart) renews ``kept`` on
    the new primary, is told ``dropped`` is lost, and new acquisitions work.
    The TTL outlives the window in which Sentinel has promoted the replica but
    not yet demoted the old primary (up to ~10 s: the sentinels' INFO period);
    during that window renewals still reach the old primary.
    """
    lost: list[Lease] = []
    kept = RedisLock(client, "kept", prefix=prefix, ttl=24, replicas=1, on_lost=lost.append)
    dropped = RedisLock(client, "dropped", prefix=prefix, ttl=24, replicas=1, on_lost=lost.append)
    assert kept.acquire(blocking=False) and dropped.acquire(blocking=False)

    old_primary = group.master_port()
    replica_port = next(s.port for s in group.servers if s.port != old_primary)
    replica = redis.Redis(port=replica_port, socket_timeout=10)
    replica.config_set("replica-read-only", "no")
    assert replica.delete(dropped.keys.holders, dropped.keys.info) == 2
    replica.config_set("replica-read-only", "yes")

    new_primary = group.failover()
    assert new_primary == replica_port

    # The heartbeat (every 8 s) reaches the new primary through Sentinel.
    wait_for(lambda: lost, 40, message="the dropped lease to be reported lost")
    assert [lease.name for lease in lost] == ["dropped"]
    assert not dropped.owned()
    assert kept.owned()
    assert kept.refresh()

    on_new = redis.Redis(port=new_primary, socket_timeout=10)
    assert on_new.zscore(kept.keys.holders, kept.lease.owner if kept.lease else "") is not None
    assert not RedisLock(client, "kept", prefix=prefix).acquire(blocking=False)
    # Without fencing, this is the failover case where two holders can act:
    # the old holder of "dropped" learned it only at its next renewal.
    newcomer = RedisLock(client, "dropped", prefix=prefix)
    assert newcomer.acquire(blocking=False)
    assert newcomer.token is not None and dropped.token is not None
    assert newcomer.token > dropped.token
    fresh = RedisLock(client, "fresh", prefix=prefix, replicas=1, replica_timeout=10)
    assert fresh.acquire(blocking=False)
    assert on_new.exists(fresh.keys.holders)
    for lock in (kept, newcomer, fresh):
        lock.release()
