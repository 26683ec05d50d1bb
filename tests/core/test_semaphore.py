"""FairSemaphore against a real redis-server and real processes."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import pytest

from celery_redislock import AcquireTimeout, FairSemaphore, NotOwned, RedisLock
from tests import procs
from tests.conftest import keys_with_prefix
from tests.waiting import wait_for

SPAWN = multiprocessing.get_context("spawn")


def test_never_more_than_limit_holders(redis_url: str, redis_client: Any, prefix: str) -> None:
    limit, processes, rounds = 3, 12, 15
    skews = [0.0] * (processes - 2) + [3600.0, -3600.0]
    with SPAWN.Pool(processes) as pool:
        results = pool.starmap(
            procs.semaphore_worker,
            [(redis_url, prefix, limit, rounds, seed, skews[seed]) for seed in range(processes)],
        )
    observed = [int(v) for v in redis_client.lrange(f"{prefix}:observed", 0, -1)]
    assert sum(r["acquired"] for r in results) == processes * rounds
    assert len(observed) == processes * rounds
    assert max(observed) <= limit
    assert max(observed) == limit, "contention never filled the semaphore: test is too weak"
    assert all(r["lost"] == 0 for r in results)
    assert keys_with_prefix(redis_client, prefix) == sorted(
        [f"{prefix}:{{slots}}:fence", f"{prefix}:observed", f"{prefix}:running"]
    )


def test_skewed_clocks_neither_steal_nor_lose(
    redis_url: str, redis_client: Any, prefix: str
) -> None:
    # The skew (an hour) dwarfs the TTL, so any decision taken on a client clock
    # shows; the TTL itself leaves a loaded machine seconds of margin between
    # renewals (every ttl/3), and the skewed holder holds for 2 TTLs.
    ttl = 5.0
    mine = FairSemaphore(redis_client, "skew", 2, ttl=ttl, prefix=prefix)
    assert mine.acquire()
    with SPAWN.Pool(2) as pool:
        ahead = pool.apply_async(procs.skewed_holder, (redis_url, prefix, 2, 3600.0, 2 * ttl, ttl))
        wait_for(lambda: len(mine.holders()) == 2, timeout=30, message="skewed process to hold")
        # full now: an hour-behind client must not purge anyone as "expired"
        behind = pool.apply(procs.skewed_holder, (redis_url, prefix, 2, -3600.0, 0.0, ttl))
        assert behind == {"acquired": False, "owned_throughout": True}
        assert ahead.get(60) == {"acquired": True, "owned_throughout": True}
    assert mine.owned()
    assert [h.owner for h in mine.holders()] == [mine.lease.owner]  # type: ignore[union-attr]
    mine.release()


def test_slots_are_handed_to_waiters_in_order(redis_client: Any, prefix: str) -> None:
    holders = [FairSemaphore(redis_client, "q", 2, prefix=prefix) for _ in range(2)]
    assert all(h.acquire() for h in holders)
    order: list[int] = []
    threads = []
    for i in range(4):

        def run(i: int = i) -> None:
            sem = FairSemaphore(redis_client, "q", 2, prefix=prefix)
            assert sem.acquire(blocking=True, timeout=30)
            order.append(i)
            sem.release()

        threads.append(threading.Thread(target=run))
        threads[-1].start()
        wait_for(lambda i=i: len(holders[0].waiters()) == i + 1, message=f"waiter {i}")
    # a newcomer must not barge past the queue
    assert not FairSemaphore(redis_client, "q", 2, prefix=prefix).acquire()
    holders[0].release()
    wait_for(lambda: order, message="first waiter served")
    holders[1].release()
    for thread in threads:
        thread.join(30)
    assert sorted(order) == [0, 1, 2, 3]
    assert order[0] == 0


def test_holders_tokens_and_cleanup(redis_client: Any, prefix: str) -> None:
    sems = [FairSemaphore(redis_client, "s", 3, prefix=prefix, meta={"job": i}) for i in range(4)]
    assert [s.acquire() for s in sems] == [True, True, True, False]
    tokens = [s.token for s in sems[:3]]
    assert all(isinstance(t, int) for t in tokens) and len(set(tokens)) == 3
    seen = sorted((h.token, h.meta["job"]) for h in sems[0].holders())
    assert seen == sorted(zip(tokens, range(3), strict=True))  # type: ignore[arg-type]
    with pytest.raises(AcquireTimeout), sems[3]:
        pass  # pragma: no cover
    for sem in sems[:3]:
        sem.release()
    assert keys_with_prefix(redis_client, prefix) == [f"{prefix}:{{s}}:fence"]


def test_expired_slot_is_purged_and_not_revived(redis_client: Any, prefix: str) -> None:
    from celery_redislock.core.heartbeat import HEARTBEAT

    stale = FairSemaphore(redis_client, "p", 1, ttl=0.2, prefix=prefix)
    assert stale.acquire()
    assert stale.lease is not None
    HEARTBEAT.discard(stale.lease)
    fresh = FairSemaphore(redis_client, "p", 1, ttl=5, prefix=prefix)
    wait_for(fresh.acquire, timeout=5, message="expired slot to be purged by acquire")
    assert stale.refresh() is False
    with pytest.raises(NotOwned):  # only the owner unlocks: the fresh slot stays
        stale.release()
    assert fresh.owned()
    assert [h.owner for h in fresh.holders()] == [fresh.lease.owner]  # type: ignore[union-attr]
    assert not FairSemaphore(redis_client, "p", 1, prefix=prefix).acquire(blocking=False)
    fresh.release()


def test_locked_counts_a_holders_own_limit(redis_client: Any, prefix: str) -> None:
    """``locked()`` says whether an acquire now would be granted: a
    ``RedisLock`` holding the name is alone, whatever this semaphore's limit."""
    lock = RedisLock(redis_client, "mixed", prefix=prefix)
    slots = FairSemaphore(redis_client, "mixed", 5, prefix=prefix)
    assert not slots.locked()
    assert lock.acquire(blocking=False)
    try:
        assert not slots.acquire(blocking=False)
        assert slots.locked()
    finally:
        lock.release()
    assert not slots.locked()
