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


KEEP_LATEST = ParkConfig(keep_latest=True)


def put_back(park: Parking, task_id: str, fence: int, token: str = "") -> Any:
    """A keep_latest run a listed limit refused goes back (``park_head.lua`` ARGV[14])."""
    return park.park_at_head(
        task_id, LOCK, "{}", 0, 0.0, "t", NO_RATE, token, 5.0, "shared", fence=fence
    )


def test_a_run_put_back_for_a_listed_limit_is_replaced_by_a_newer_call(
    redis_client: Any, prefix: str
) -> None:
    """keep_latest and a listed limit: the run goes back as the pending call
    (not the head a retry marks), and the next call takes its place."""
    park = Parking(redis_client, prefix, "back")
    back = put_back(park, "refused", fence=7)
    assert (back.verdict.value, back.count, back.replaced) == ("parked", 1, ())
    newer = park.enqueue("newer", LOCK, "{}", 0, KEEP_LATEST, "t")
    assert (newer.replaced, newer.count) == (("refused",), 1)
    assert [e["task_id"] for e in park.status(5).entries] == ["newer"]


def test_a_run_put_back_gives_way_to_a_newer_call_parked_already(
    redis_client: Any, prefix: str
) -> None:
    """A call parked while the run held the key is newer: the run is not
    parked, it is superseded by that call; its copy (a token, or a
    token-less copy's mark) is stale."""
    lock = RedisLock(redis_client, "given", prefix=prefix, ttl=5)
    assert lock.acquire()
    park = Parking(redis_client, prefix, "given")
    assert park.enqueue("newer", LOCK, "{}", 0, KEEP_LATEST, "t").count == 1
    lock.release()
    gone = put_back(park, "refused", fence=3, token="~w1:42")
    assert (gone.verdict.value, gone.reason) == ("superseded", "newer")
    assert [e["task_id"] for e in park.status(5).entries] == ["newer"]
    assert park.where("refused", "~w1:42") == ("", "stale")
    assert park.where("refused", "~w1:43") == ("", "")  # another copy's mark
    # The task runs again in that process (a retry without a token): its
    # arrival drops the mark, so a crash of that run is its own.
    again = park.arrive("refused", LOCK, "{}", 0, KEEP_LATEST, "o", 5.0, "{}", "t", mark="~w1:42")
    assert again.verdict.value in ("held", "parked")
    assert park.where("refused", "~w1:42")[1] == ""


@pytest.mark.parametrize("older_first", [True, False])
def test_of_two_runs_put_back_the_one_admitted_last_stays(
    redis_client: Any, prefix: str, older_first: bool
) -> None:
    """With a key limit over 1, two refused runs go back in either order:
    the one with the higher fencing token (admitted last) stays parked."""
    park = Parking(redis_client, prefix, "two")
    runs = [("older", 4), ("newer", 5)]
    first, second = runs if older_first else runs[::-1]
    assert put_back(park, *first).verdict.value == "parked"
    outcome = put_back(park, *second)
    if older_first:
        assert (outcome.verdict.value, outcome.replaced, outcome.count) == ("parked", ("older",), 1)
    else:
        assert (outcome.verdict.value, outcome.reason) == ("superseded", "newer")
    assert [e["task_id"] for e in park.status(5).entries] == ["newer"]


def test_a_retried_run_put_back_for_a_listed_limit_loses_its_head_mark(
    redis_client: Any, prefix: str
) -> None:
    """A keep_latest run its own retry had put at the head, refused by a
    listed limit when it runs again, is replaceable: a newer call takes
    its place."""
    park = Parking(redis_client, prefix, "mark")
    assert park.park_at_head("run", LOCK, "{}", 0, 0.0, "t", NO_RATE).count == 1  # its retry
    assert park.drop("run").where == "parked"  # taken out: it runs again
    assert put_back(park, "run", fence=9).verdict.value == "parked"
    newer = park.enqueue("newer", LOCK, "{}", 0, KEEP_LATEST, "t")
    assert newer.replaced == ("run",)
