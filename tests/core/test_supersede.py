"""``lock_supersede`` in the core: a call that parks with ``supersede`` marks the
name's current holders (the info hash's ``:superseded`` field); renewals
report it, ``checkpoint()`` raises ``Superseded``, a resource guarded by the
lock refuses the superseded tokens, and the next holder is not superseded."""

from __future__ import annotations

from typing import Any

import pytest

from celery_redislock import FencedResource, RedisLock, Superseded
from celery_redislock.core.capacity import Capacity
from celery_redislock.core.heartbeat import refresh_leases
from celery_redislock.core.park import ParkConfig, Parking
from celery_redislock.core.rate import NO_RATE

LOCK = Capacity.lock()

SUPERSEDE = ParkConfig(keep_latest=True, supersede=True)


def test_a_parked_newer_call_supersedes_the_holder(redis_client: Any, prefix: str) -> None:
    lock = RedisLock(redis_client, "sup", prefix=prefix, ttl=5, index=True)
    assert lock.acquire()
    resource = FencedResource(redis_client, f"{lock.keys.base}:data", guard=lock)
    assert resource.write(lock.token or 0, "old")
    lock.checkpoint()  # nothing yet
    assert not lock.superseded
    admission = Parking(redis_client, prefix, "sup").enqueue("newer", LOCK, "{}", 0, SUPERSEDE, "t")
    assert admission.count == 1  # parked behind the holder
    assert lock.lease is not None and lock.lease.renew() > 0  # renewed, and ...
    assert lock.superseded  # ... told it is superseded
    with pytest.raises(Superseded) as raised:
        lock.checkpoint()
    assert (raised.value.name, raised.value.by) == ("sup", "newer")
    assert not resource.write(lock.token or 0, "late")  # refused by the guard
    assert redis_client.hget(resource.key, "value") == b"old"
    lock.release()
    successor = RedisLock(redis_client, "sup", prefix=prefix, ttl=5)
    assert successor.acquire()
    successor.checkpoint()  # a newer token: not superseded
    assert refresh_leases(redis_client, [successor.lease]) != [0] and not successor.superseded
    assert resource.write(successor.token or 0, "new")
    successor.release()


def test_without_supersede_nothing_is_marked(redis_client: Any, prefix: str) -> None:
    lock = RedisLock(redis_client, "plain", prefix=prefix, ttl=5)
    assert lock.acquire()
    Parking(redis_client, prefix, "plain").enqueue(
        "n", LOCK, "{}", 0, ParkConfig(keep_latest=True), "t"
    )
    assert lock.lease is not None and lock.lease.renew() > 0 and not lock.superseded
    lock.checkpoint()
    lock.release()


def test_a_guard_on_a_cluster_needs_the_locks_slot(redis_client: Any, prefix: str) -> None:
    with pytest.raises(TypeError, match="guard must be a RedisLock"):
        FencedResource(redis_client, "k", guard="lock")


@pytest.mark.parametrize("supersede", [False, True])
def test_a_run_put_back_at_the_head_is_replaced_only_by_a_superseding_call(
    redis_client: Any, prefix: str, supersede: bool
) -> None:
    """keep_latest: a newer call takes out the pending call, never the run put
    back at the head (a retry or a pause of the running run), unless it supersedes."""
    lock = RedisLock(redis_client, "head", prefix=prefix, ttl=5)
    assert lock.acquire()
    park = Parking(redis_client, prefix, "head")
    config = ParkConfig(keep_latest=True, supersede=supersede)
    assert park.enqueue("pending", LOCK, "{}", 0, config, "t").count == 1
    retried = park.park_at_head("running", LOCK, "{}", 0, 5.0, "t", NO_RATE)
    assert retried.count == 2  # ahead of the pending call
    newer = park.enqueue("newer", LOCK, "{}", 0, config, "t")
    if supersede:
        assert (sorted(newer.replaced), newer.count) == (["pending", "running"], 1)
        assert [e["task_id"] for e in park.status(5).entries] == ["newer"]
    else:
        assert (newer.replaced, newer.count) == (("pending",), 2)
        assert [e["task_id"] for e in park.status(5).entries] == ["running", "newer"]
    lock.release()
