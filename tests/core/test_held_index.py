"""The index of held names (core/keys.py ``held_index``, ``index_held()`` in
includes/lease_set_keys.lua): what the exporter's slot gauges read instead of the keyspace.

Every grant and renewal of an indexed lease set lists its name until that
lease's expiry; a name whose leases have all ended leaves when another name
enters; a bare lock or semaphore is not listed.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from celery_redislock import FairSemaphore, RedisLock
from celery_redislock.core.capacity import Capacity
from celery_redislock.core.heartbeat import refresh_leases
from celery_redislock.core.inspection import force_release
from celery_redislock.core.keys import LeaseKeys, held_index
from celery_redislock.core.park import ParkConfig, Parking
from celery_redislock.core.scripts import ACQUIRE, REFRESH_PREFIX
from tests.waiting import wait_for


def listed(client: Any, prefix: str) -> dict[str, int]:
    return {
        n.decode(): int(s) for n, s in client.zrange(held_index(prefix), 0, -1, withscores=True)
    }


def redis_ms(client: Any) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def expiry_of(client: Any, lock: Any) -> int:
    return int(client.zscore(lock.keys.holders, lock.lease.owner))


def queued_waiter(client: Any, holder: RedisLock) -> tuple[RedisLock, Callable[[], bool]]:
    """Take ``holder``'s lock, then queue an indexed waiter for it in a thread;
    returns the waiter and ``acquired()``, which joins the thread and tells
    whether its ``acquire()`` returned True."""
    assert holder.acquire()
    waiter = RedisLock(
        client, holder.name, prefix=holder.keys.prefix, index=True, ttl=5, blocking_timeout=10
    )
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire()))
    thread.start()
    wait_for(lambda: client.zcard(waiter.keys.queue) == 1, 10, message="the waiter queued")

    def acquired() -> bool:
        thread.join(10)
        return got == [True]

    return waiter, acquired


def test_a_grant_lists_the_name_until_its_lease_expiry_and_the_last_release_unlists_it(
    redis_client: Any, prefix: str
) -> None:
    lock = RedisLock(redis_client, "report:1", prefix=prefix, index=True, ttl=5)
    bare = FairSemaphore(redis_client, "bare", 2, prefix=prefix, ttl=5)
    assert lock.acquire() and bare.acquire()
    assert listed(redis_client, prefix) == {"report:1": expiry_of(redis_client, lock)}
    shared = [
        FairSemaphore(redis_client, "shared", 2, prefix=prefix, index=True, ttl=5) for _ in range(2)
    ]
    assert all(s.acquire() for s in shared)
    shared[0].release()
    assert "shared" in listed(redis_client, prefix)  # still one holder
    shared[1].release()
    lock.release()
    bare.release()
    assert not redis_client.exists(held_index(prefix))  # nothing left behind


def test_renewals_move_the_listing_later(redis_client: Any, prefix: str) -> None:
    lock = RedisLock(redis_client, "a", prefix=prefix, index=True, ttl=5)
    other = RedisLock(redis_client, "b", prefix=prefix, index=True, ttl=5)
    assert lock.acquire() and other.acquire()
    first = listed(redis_client, prefix)
    wait_for(lambda: redis_ms(redis_client) > first["a"] - 5000 + 20, 5, message="time to pass")
    assert lock.lease.renew() > 0  # refresh.lua, one lease
    assert listed(redis_client, prefix)["a"] == expiry_of(redis_client, lock) > first["a"]
    assert refresh_leases(redis_client, [other.lease]) != [0]  # the heartbeat's batch
    assert listed(redis_client, prefix)["b"] == expiry_of(redis_client, other) > first["b"]
    lock.release()
    other.release()


def test_the_main_process_renewal_of_a_childs_lease_lists_it(
    redis_client: Any, prefix: str
) -> None:
    lock = RedisLock(redis_client, "child", prefix=prefix, index=True, ttl=5, owner_prefix="task1")
    assert lock.acquire()
    before = listed(redis_client, prefix)["child"]
    redis_client.zrem(held_index(prefix), "child")
    keys = LeaseKeys(prefix, "child", indexed=True)
    renewed, _ = REFRESH_PREFIX(redis_client, keys.refresh_keys(), ["task1"])
    assert int(renewed) == 1
    assert listed(redis_client, prefix)["child"] >= before
    lock.release()


def test_a_name_whose_holder_died_is_skipped_then_dropped(redis_client: Any, prefix: str) -> None:
    """A holder that dies unreleased (a raw acquire.lua call, nobody renews it)
    leaves its name listed with its expiry: readers skip it from then on, and
    a name entering the index drops it (one entry in 16, by fencing token)."""
    keys = LeaseKeys(prefix, "dead", indexed=True)
    assert int(ACQUIRE(redis_client, keys.script_keys(), ["dead1", -1, 200, "{}", "0", 1000])) > 0
    ended = listed(redis_client, prefix)["dead"]
    wait_for(lambda: redis_ms(redis_client) > ended, 5, message="the expiry")
    for n in range(2000):  # tokens are not sequential: about one entry in 16 prunes
        other = RedisLock(redis_client, f"next{n}", prefix=prefix, index=True, ttl=5)
        assert other.acquire()
        other.release()
        if "dead" not in listed(redis_client, prefix):
            break
    assert not redis_client.exists(held_index(prefix))


def test_a_waiter_handed_a_slot_by_a_bare_release_is_listed_at_its_first_renewal(
    redis_client: Any, prefix: str
) -> None:
    holder = RedisLock(redis_client, "handoff", prefix=prefix, ttl=5)  # not indexed
    waiter, acquired = queued_waiter(redis_client, holder)
    holder.release()  # hands the slot over inside release.lua, without the index
    assert acquired()
    assert "handoff" not in listed(redis_client, prefix)  # the release knew no index
    assert waiter.lease.renew() > 0  # the heartbeat's, within ttl / 3
    assert listed(redis_client, prefix)["handoff"] == expiry_of(redis_client, waiter)
    waiter.release()


def test_the_park_lists_what_it_holds_and_reserves(redis_client: Any, prefix: str) -> None:
    park = Parking(redis_client, prefix, f"acct:{uuid.uuid4().hex[:6]}")
    admission = park.enqueue("t1", Capacity.semaphore(1), '{"task": "x"}', 0, ParkConfig(), "x")
    assert admission.token > 0  # a reservation: a slot taken for the promoted task
    assert park.name in listed(redis_client, prefix)


def test_a_force_release_lists_the_waiter_it_hands_the_slot_to(
    redis_client: Any, prefix: str
) -> None:
    holder = RedisLock(redis_client, "forced", prefix=prefix, index=True, ttl=5)
    waiter, acquired = queued_waiter(redis_client, holder)
    redis_client.zrem(held_index(prefix), "forced")
    assert force_release(redis_client, prefix, "forced")  # the CLI's `release`
    assert acquired()
    assert listed(redis_client, prefix)["forced"] == expiry_of(redis_client, waiter)
    waiter.release()
