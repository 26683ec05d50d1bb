"""Different limits on one name: no holder ever shares its name with more
holders than its own limit allows (a lock holder is always alone).

Against a real redis-server, with real processes for the contended mix.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from typing import Any

import redis

from celery_redislock import FairSemaphore, RedisLock
from celery_redislock.core.leaseset import LeaseSet, parse_inspect
from celery_redislock.core.scripts import ACQUIRE, INSPECT
from tests.waiting import wait_for

SPAWN = multiprocessing.get_context("spawn")


def mixed_worker(url: str, prefix: str, limit: int, rounds: int, seed: int) -> int:
    """Hold "mix" ``rounds`` times with ``limit`` (1: a RedisLock); after each
    grant record "limit:holders counted" (a lower bound of the real holders:
    the count rises after the grant and falls before the release)."""
    client = redis.Redis.from_url(url, socket_timeout=30)
    rng = random.Random(seed)
    lease_set: LeaseSet = (
        RedisLock(client, "mix", ttl=10, prefix=prefix)
        if limit == 1
        else FairSemaphore(client, "mix", limit, ttl=10, prefix=prefix)
    )
    held = 0
    for _ in range(rounds):
        # Both ways in: a direct grant (non-blocking) and a hand-off (queue).
        if not (rng.random() < 0.3 and lease_set.acquire(blocking=False)):
            assert lease_set.acquire(blocking=True, timeout=60)
        running = client.incr(f"{prefix}:running")
        client.rpush(f"{prefix}:observed", f"{limit}:{running}")
        time.sleep(rng.uniform(0, 0.004))
        client.decr(f"{prefix}:running")
        lease_set.release()
        held += 1
    return held


def test_mixed_limits_never_exceed_any_holders_limit(
    redis_url: str, redis_client: Any, prefix: str
) -> None:
    """3 locks, 2 x limit 2 and 3 x limit 5 contend for one name (the issue's
    mix: on the old code about 300 of 640 holds saw too many co-holders)."""
    limits = [1, 1, 1, 2, 2, 5, 5, 5]
    rounds = 40
    with SPAWN.Pool(len(limits)) as pool:
        held = pool.starmap(
            mixed_worker,
            [(redis_url, prefix, limit, rounds, seed) for seed, limit in enumerate(limits)],
        )
    assert held == [rounds] * len(limits)
    observed = [
        tuple(int(x) for x in v.decode().split(":"))
        for v in redis_client.lrange(f"{prefix}:observed", 0, -1)
    ]
    assert len(observed) == rounds * len(limits)
    too_many = [(limit, running) for limit, running in observed if running > limit]
    assert too_many == [], f"{len(too_many)} holds saw more co-holders than their limit"
    # The test has teeth only if limit-5 holders did run side by side.
    assert max(running for limit, running in observed if limit == 5) >= 2


def test_semaphore_never_joins_a_lock_holder(redis_client: Any, prefix: str) -> None:
    lock = RedisLock(redis_client, "mix", ttl=10, prefix=prefix)
    assert lock.acquire()
    assert not FairSemaphore(redis_client, "mix", 5, ttl=10, prefix=prefix).acquire()
    # nor when the lock holder's slot is handed to a waiting semaphore: the
    # next semaphore caller joins that one (5 allows it), never the lock
    sem_a = FairSemaphore(redis_client, "mix", 5, ttl=10, prefix=prefix)
    sem_b = FairSemaphore(redis_client, "mix", 5, ttl=10, prefix=prefix)
    assert not sem_b.acquire(blocking=True, timeout=0.05)
    lock.release()
    assert sem_a.acquire() and sem_b.acquire()
    assert not RedisLock(redis_client, "mix", ttl=10, prefix=prefix).acquire(blocking=False)
    assert {h.limit for h in sem_a.holders()} == {5}
    sem_a.release()
    sem_b.release()


def test_lowered_limit_while_holders_run(redis_client: Any, prefix: str) -> None:
    """Five hold with limit 5; the limit is lowered to 2 (newcomers pass 2).

    No limit-2 caller is admitted while >= 2 hold, a release by a limit-5
    holder does not promote a limit-2 waiter into a set of >= 2, nobody
    barges past the queued limit-2 waiter, and once a limit-2 caller holds,
    nobody with limit 5 joins beyond 2.
    """
    old = [FairSemaphore(redis_client, "acct", 5, ttl=10, prefix=prefix) for _ in range(5)]
    assert all(s.acquire() for s in old)
    assert not FairSemaphore(redis_client, "acct", 2, ttl=10, prefix=prefix).acquire()

    waiter = FairSemaphore(redis_client, "acct", 2, ttl=10, prefix=prefix)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(blocking=True, timeout=60)))
    thread.start()
    queued = wait_for(lambda: old[0].waiters(), message="limit-2 waiter to queue")
    waiter_owner = queued[0].owner

    for releasing in range(3):  # 5 -> 2 holders, each release by a limit-5 holder
        old[releasing].release()
        holders = [h.owner for h in old[4].holders()]
        assert waiter_owner not in holders, f"limit-2 waiter promoted beside {len(holders) - 1}"
        assert len(holders) == 4 - releasing
        assert [w.owner for w in old[4].waiters()] == [waiter_owner]
        # a limit-5 newcomer (with room by its own limit) must not barge past it
        assert not FairSemaphore(redis_client, "acct", 5, ttl=10, prefix=prefix).acquire()
    old[3].release()  # one holder left: this release hands the slot to the waiter
    thread.join(20)
    assert got == [True]
    assert sorted((h.limit or 0, h.owner == waiter_owner) for h in old[4].holders()) == [
        (2, True),
        (5, False),
    ]
    # Two hold and one of them allows 2: a limit-5 caller may not join.
    assert not FairSemaphore(redis_client, "acct", 5, ttl=10, prefix=prefix).acquire()
    old[4].release()
    # Now the limit-2 holder is alone: one more (of either limit) may join, not two.
    joined = FairSemaphore(redis_client, "acct", 5, ttl=10, prefix=prefix)
    assert joined.acquire()
    assert not FairSemaphore(redis_client, "acct", 5, ttl=10, prefix=prefix).acquire()
    joined.release()
    waiter.release()


def test_raised_limit_takes_effect_for_newcomers(redis_client: Any, prefix: str) -> None:
    low = [FairSemaphore(redis_client, "raise", 2, ttl=10, prefix=prefix) for _ in range(2)]
    assert all(s.acquire() for s in low)
    # The holders allow 2: a caller with limit 5 may not make it 3 ...
    assert not FairSemaphore(redis_client, "raise", 5, ttl=10, prefix=prefix).acquire()
    low[0].release()
    high = [FairSemaphore(redis_client, "raise", 5, ttl=10, prefix=prefix) for _ in range(5)]
    assert high[0].acquire()
    low[1].release()
    # ... and once the limit-2 holders are gone, the raised limit applies.
    assert all(s.acquire() for s in high[1:])
    assert not FairSemaphore(redis_client, "raise", 5, ttl=10, prefix=prefix).acquire()
    for s in high:
        s.release()


def test_holders_and_waiters_read_back_the_limit_they_store(redis_client: Any, prefix: str) -> None:
    """Every info and qinfo entry stores its limit; inspection reads it back."""
    lock = RedisLock(redis_client, "stored", ttl=10, prefix=prefix)
    assert lock.acquire()
    sem = FairSemaphore(redis_client, "stored", 4, ttl=10, prefix=prefix)
    limit, ttl_ms, wait_ms = sem._constant_args
    args = ["sem-waiter", limit, ttl_ms, "{}", "1", wait_ms]
    assert ACQUIRE(redis_client, sem._script_keys, args) < 0  # queued behind the lock
    _, holders, waiters = parse_inspect(INSPECT(redis_client, sem._script_keys, []))
    assert lock.lease is not None
    assert [(h.owner, h.limit) for h in holders] == [(lock.lease.owner, 1)]
    assert [(w.owner, w.limit) for w in waiters] == [("sem-waiter", 4)]
    assert sem.release_owner("sem-waiter") is False  # it was only queued
    lock.release()
