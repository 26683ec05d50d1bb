"""RedisLock against a real redis-server and real processes."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest
import redis

from celery_redislock import AcquireTimeout, LockError, LockLost, NotOwned, RedisLock
from celery_redislock.core.heartbeat import HEARTBEAT
from celery_redislock.testing.servers import RedisServer
from tests import procs
from tests.conftest import keys_with_prefix
from tests.waiting import wait_for

SPAWN = multiprocessing.get_context("spawn")


def test_counter_experiment_under_contention(
    redis_url: str, redis_client: Any, prefix: str
) -> None:
    """The lost-update experiment of "Python 分布式锁": 16 processes, read-sleep-write."""
    processes, increments = 16, 15
    workers = [
        SPAWN.Process(target=procs.counter_worker, args=(redis_url, prefix, increments, seed))
        for seed in range(processes)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    assert int(redis_client.get(f"{prefix}:value")) == processes * increments
    tokens = [int(t) for t in redis_client.lrange(f"{prefix}:tokens", 0, -1)]
    assert len(tokens) == processes * increments
    assert all(a < b for a, b in itertools.pairwise(tokens)), "tokens not increasing"


def test_killed_holder_frees_lock_after_ttl(redis_url: str, redis_client: Any, prefix: str) -> None:
    ready = f"{prefix}:ready"
    holder = SPAWN.Process(target=procs.hold_forever, args=(redis_url, prefix, "k", 1.5, ready))
    holder.start()
    try:
        wait_for(lambda: redis_client.llen(ready), timeout=30, message="holder to acquire")
        dead_token = int(redis_client.lindex(ready, 0))
        waiter = RedisLock(redis_client, "k", ttl=5, prefix=prefix)
        assert not waiter.acquire(blocking=False)
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        assert waiter.acquire(timeout=30)
        # nobody released: the lease had to run out (1.5 s), not be handed over
        assert time.monotonic() - killed_at > 0.5
        assert waiter.token is not None and waiter.token > dead_token
        waiter.release()
    finally:
        holder.kill()
        holder.join()


def test_heartbeat_keeps_lock_five_ttls(redis_client: Any, prefix: str) -> None:
    lock = RedisLock(redis_client, "long", ttl=0.6, prefix=prefix)
    other = RedisLock(redis_client, "long", ttl=0.6, prefix=prefix)
    assert lock.acquire()
    deadline = time.monotonic() + 5 * 0.6
    while time.monotonic() < deadline:
        assert lock.owned()
        assert not other.acquire(blocking=False)
        time.sleep(0.1)
    assert [h.owner for h in lock.holders()] == [lock.lease.owner]  # type: ignore[union-attr]
    lock.release()


def test_holder_is_told_when_key_deleted(redis_client: Any, prefix: str) -> None:
    lost: list[Any] = []
    lock = RedisLock(redis_client, "gone", ttl=3, prefix=prefix, on_lost=lost.append)
    assert lock.acquire()
    redis_client.delete(lock.keys.holders)
    deleted_at = time.monotonic()
    # one heartbeat interval is 1 s; the TTL (3 s) would tell it only later
    wait_for(lambda: lost, timeout=2.5, message="on_lost callback")
    assert time.monotonic() - deleted_at < 3
    assert lost == [lock.lease]
    assert not lock.owned()
    assert lock.lease is not None and "gone at renewal" in (lock.lease.lost_reason or "")
    lease = lock.lease
    with pytest.raises(LockLost):
        lock.release()
    assert lost == [lease]  # told once


def test_waiter_is_woken_by_release(own_redis: RedisServer, prefix: str) -> None:
    """The waiter issues one acquire and one BLPOP: it is woken by the release, no poll."""
    client = redis.Redis.from_url(own_redis.url)
    holder = RedisLock(client, "wake", ttl=30, prefix=prefix)
    waiter = RedisLock(client, "wake", ttl=30, prefix=prefix)
    assert holder.acquire()
    holder_token = holder.token
    client.config_resetstat()
    woke: list[float] = []

    def wait() -> None:
        assert waiter.acquire(timeout=20)
        woke.append(time.monotonic())

    thread = threading.Thread(target=wait)
    thread.start()
    wait_for(lambda: holder.waiters(), message="waiter to queue")
    released_at = time.monotonic()
    holder.release()
    thread.join(20)
    assert woke, "waiter did not acquire"
    stats = client.info("commandstats")
    assert stats["cmdstat_blpop"]["calls"] == 1
    assert woke[0] - released_at < 1.0  # woken by the release, long before the 2.5 s re-arm
    assert waiter.owned() and waiter.token is not None and holder_token is not None
    assert waiter.token > holder_token
    waiter.release()


def test_a_release_wakes_one_waiter_and_no_herd(own_redis: RedisServer, prefix: str) -> None:
    """bullmq #909, python-redis-lock's shared signal list: waking every waiter
    on a release costs a command from each.  Here a release wakes the next
    waiter only: with eight queued, the release and the woken one's commands
    are all Redis sees (their queue re-arms are pushed past the test by a long
    wait lease, so any other waiter's command would be counted)."""
    client = redis.Redis.from_url(own_redis.url)
    with RedisLock(client, "herd-warm", prefix=prefix):
        pass  # the release script loaded: no NOSCRIPT round below
    holder = RedisLock(client, "herd", ttl=60, prefix=prefix)
    assert holder.acquire()
    got: list[int] = []
    waiters = [RedisLock(client, "herd", ttl=60, prefix=prefix) for _ in range(8)]
    threads = []
    for n, waiter in enumerate(waiters):
        waiter._constant_args = (*waiter._constant_args[:2], b"60000")  # re-ask every 30 s
        thread = threading.Thread(
            target=lambda n=n, w=waiter: w.acquire(timeout=60) and got.append(n)
        )
        thread.start()
        threads.append(thread)
        wait_for(lambda n=n: len(holder.waiters()) == n + 1, message=f"waiter {n} queued")
    client.config_resetstat()
    holder.release()
    wait_for(lambda: got, timeout=20, message="the next waiter to take the lock")
    stats = client.info("commandstats")
    assert got == [0]
    # the release's script call (FCALL or EVALSHA) and at most the woken waiter's BLPOP (sent before
    # the reset: some Redis versions count a blocked command when it is
    # served); a hand-off right after the wait needs no renewal on receipt.
    # A herd would show each other waiter asking and blocking again.
    assert sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("fcall", "evalsha")) == 1, (
        stats
    )
    assert stats.get("cmdstat_blpop", {}).get("calls", 0) <= 1, stats
    assert len(holder.waiters()) == 7
    for waiter in waiters:  # each hands on to the next, one at a time
        wait_for(waiter.owned, timeout=20, message="its turn")
        waiter.release()
    for thread in threads:
        thread.join(20)
    assert got == list(range(8))


def test_waiters_are_served_in_arrival_order(redis_client: Any, prefix: str) -> None:
    holder = RedisLock(redis_client, "fifo", ttl=10, prefix=prefix)
    assert holder.acquire()
    order: list[int] = []
    threads = []
    for i in range(6):

        def run(i: int = i) -> None:
            lock = RedisLock(redis_client, "fifo", ttl=10, prefix=prefix)
            assert lock.acquire(timeout=30)
            order.append(i)
            lock.release()

        thread = threading.Thread(target=run)
        thread.start()
        threads.append(thread)
        wait_for(lambda i=i: len(holder.waiters()) == i + 1, message=f"waiter {i} queued")
    holder.release()
    for thread in threads:
        thread.join(30)
    assert order == list(range(6))


def test_fencing_tokens_increase_across_fence_loss_and_restart(own_redis: RedisServer) -> None:
    client = redis.Redis.from_url(own_redis.url)
    tokens = []
    for step in range(3):
        lock = RedisLock(client, "fence", ttl=5)
        assert lock.acquire()
        tokens.append(lock.token)
        lock.release()
        if step == 0:
            client.delete(lock.keys.fence)
        if step == 1:
            own_redis.restart()
    assert tokens[0] < tokens[1] < tokens[2]


def test_fencing_token_follows_a_fence_ahead_of_redis_time(redis_client: Any, prefix: str) -> None:
    # A fence above Redis time in microseconds (the server clock stepped back
    # after tokens were issued): the next tokens continue from it, one by one.
    lock = RedisLock(redis_client, "ahead", ttl=5, prefix=prefix)
    seconds, micros = redis_client.time()
    ahead = (seconds + 3600) * 10**6 + micros  # an hour ahead (tokens stay below 2**53)
    redis_client.set(lock.keys.fence, ahead, px=60_000)
    tokens = []
    for _ in range(3):
        assert lock.acquire()
        tokens.append(lock.token)
        lock.release()
    assert tokens == [ahead + 1, ahead + 2, ahead + 3]
    assert 0 < redis_client.pttl(lock.keys.fence) <= 600_000


def test_handed_off_waiter_whose_info_was_lost_gets_a_new_token(
    redis_client: Any, prefix: str
) -> None:
    # The slot is handed to a queued waiter, then the info key is deleted
    # before the waiter asks again: it is still the holder, with a fresh token.
    from celery_redislock.core.scripts import ACQUIRE

    holder = RedisLock(redis_client, "lost-info", ttl=5, prefix=prefix)
    assert holder.acquire()
    limit, ttl_ms, wait_ms = holder._constant_args
    args = ["waiter-1", limit, ttl_ms, "{}", "1", wait_ms]
    assert ACQUIRE(redis_client, holder._script_keys, args) < 0  # queued
    first = holder.token
    holder.release()  # hands the slot to the waiter
    assert redis_client.zscore(holder.keys.holders, "waiter-1") is not None
    redis_client.delete(holder.keys.info)
    token = ACQUIRE(redis_client, holder._script_keys, args)
    assert first is not None and token > first
    info = redis_client.hget(holder.keys.info, "waiter-1")
    assert info is not None and info.decode().startswith(f"{token}:")
    assert redis_client.pttl(holder.keys.info) > 0
    assert RedisLock(redis_client, "lost-info", prefix=prefix).holders()[0].token == token
    redis_client.delete(holder.keys.holders, holder.keys.info, holder.keys.wake("waiter-1"))


def test_nothing_left_after_release_but_bounded_fence(redis_client: Any, prefix: str) -> None:
    locks = [RedisLock(redis_client, f"n{i}", ttl=5, prefix=prefix) for i in range(5)]
    for lock in locks:
        assert lock.acquire()
    waiter = RedisLock(redis_client, "n0", ttl=5, prefix=prefix)
    assert not waiter.acquire(timeout=0.05)  # queued, then gave up
    for lock in locks:
        lock.release()
    remaining = keys_with_prefix(redis_client, prefix)
    assert remaining == sorted(f"{prefix}:{{n{i}}}:fence" for i in range(5))
    for key in remaining:
        assert 0 < redis_client.pttl(key) <= 600_000


def test_context_manager_and_timeouts(redis_client: Any, prefix: str) -> None:
    with RedisLock(redis_client, "cm", prefix=prefix) as lock:
        assert lock.owned() and lock.locked()
        with (
            pytest.raises(AcquireTimeout),
            RedisLock(redis_client, "cm", prefix=prefix, blocking_timeout=0.05),
        ):
            pass  # pragma: no cover
        with pytest.raises(LockError, match="already holds"):
            lock.acquire()
    assert not lock.owned() and not lock.locked()
    with pytest.raises(NotOwned):
        lock.release()
    with pytest.raises(NotOwned):
        lock.refresh()


def test_refresh_never_revives_an_expired_lease(redis_client: Any, prefix: str) -> None:
    lock = RedisLock(redis_client, "stale", ttl=0.2, prefix=prefix)
    assert lock.acquire()
    assert lock.lease is not None
    HEARTBEAT.discard(lock.lease)  # nobody renews it now
    wait_for(lambda: not lock.holders(), timeout=5, message="lease to expire")
    assert lock.refresh() is False
    assert not lock.holders() and not lock.owned()
    assert RedisLock(redis_client, "stale", prefix=prefix).acquire(blocking=False)


def test_a_holder_whose_lease_expired_cannot_release_the_next_holder(
    redis_client: Any, prefix: str
) -> None:
    """Only the owner unlocks (the seeds' blind ``DEL`` and GET-then-DEL): a
    holder that lost its lease and calls ``release()`` after another process
    took the name is told, and the new holder keeps the name."""
    stale = RedisLock(redis_client, "owner-only", ttl=0.2, prefix=prefix)
    assert stale.acquire()
    assert stale.lease is not None
    HEARTBEAT.discard(stale.lease)  # a holder paused past its ttl: nobody renews it
    fresh = RedisLock(redis_client, "owner-only", ttl=10, prefix=prefix)
    assert fresh.acquire(timeout=10)
    with pytest.raises(NotOwned):
        stale.release()
    assert fresh.owned()
    assert [h.owner for h in fresh.holders()] == [fresh.lease.owner]  # type: ignore[union-attr]
    assert not RedisLock(redis_client, "owner-only", prefix=prefix).acquire(blocking=False)
    fresh.release()


def test_unreachable_redis_fails_closed(prefix: str) -> None:
    from celery_redislock.testing.servers import free_port

    client = redis.Redis(port=free_port(), socket_connect_timeout=0.5)
    lock = RedisLock(client, "down", prefix=prefix)
    with pytest.raises(redis.ConnectionError):
        lock.acquire()
    assert not lock.owned() and lock.token is None
