"""Waiting: a hand-off after a long wait is a full lease; a waiter that dies
in the queue delays the next one by at most its own ttl (real SIGKILL)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest
import redis

from celery_redislock import FairSemaphore, NotOwned, RedisLock
from celery_redislock.core.leaseset import LeaseSet
from celery_redislock.core.scripts import ACQUIRE
from tests.waiting import wait_for

SPAWN = multiprocessing.get_context("spawn")


def _handed_over_after_long_wait(holder: LeaseSet, waiter: LeaseSet) -> None:
    """``holder`` (long ttl) holds for 2 s while ``waiter`` (ttl 0.6 s)
    waits; the release hands the slot over.  acquire() returning True must
    mean a live lease: owned() right away, and kept (renewed) for 3 ttls."""
    assert holder.acquire()
    result: list[tuple[bool, bool]] = []

    def wait() -> None:
        got = waiter.acquire(blocking=True, timeout=30)
        result.append((got, waiter.owned()))

    thread = threading.Thread(target=wait)
    thread.start()
    wait_for(lambda: holder.waiters(), message="waiter to queue")
    time.sleep(2.0)  # the scenario: a wait of several of the waiter's ttls
    holder.release()
    thread.join(30)
    assert result == [(True, True)], "handed the slot, but the lease counts as lost"
    lease = waiter.lease
    assert lease is not None
    until = time.monotonic() + 3 * waiter.ttl
    while time.monotonic() < until:
        assert waiter.owned(), lease.lost_reason
        time.sleep(0.05)
    assert lease.owner in [h.owner for h in waiter.holders()]
    waiter.release()


def test_lock_handed_over_after_a_long_wait_is_owned(redis_client: Any, prefix: str) -> None:
    _handed_over_after_long_wait(
        RedisLock(redis_client, "handoff", ttl=30, prefix=prefix),
        RedisLock(redis_client, "handoff", ttl=0.6, prefix=prefix),
    )


def test_semaphore_slot_handed_over_after_a_long_wait_is_owned(
    redis_client: Any, prefix: str
) -> None:
    other = FairSemaphore(redis_client, "handoff", 2, ttl=30, prefix=prefix)
    assert other.acquire()
    _handed_over_after_long_wait(
        FairSemaphore(redis_client, "handoff", 2, ttl=30, prefix=prefix),
        FairSemaphore(redis_client, "handoff", 2, ttl=0.6, prefix=prefix),
    )
    other.release()


def queued_waiter(url: str, prefix: str, name: str, ttl: float) -> None:
    """Queue for ``name`` and wait (until killed)."""
    client = redis.Redis.from_url(url)
    RedisLock(client, name, ttl=ttl, prefix=prefix).acquire(blocking=True, timeout=120)
    while True:
        time.sleep(1)


def _queue_dead_waiter_then_live_one(
    redis_url: str, redis_client: Any, prefix: str
) -> tuple[RedisLock, list[float], threading.Thread]:
    """A holds (ttl 30); B (a process, ttl 0.5 s) queues; C (ttl 30) queues
    behind B; B is SIGKILLed.  Returns A, C's acquisition times, C's thread."""
    holder = RedisLock(redis_client, "dead", ttl=30, prefix=prefix)
    assert holder.acquire()
    dead = SPAWN.Process(target=queued_waiter, args=(redis_url, prefix, "dead", 0.5))
    dead.start()
    wait_for(lambda: holder.waiters(), timeout=30, message="B to queue")
    live = RedisLock(redis_client, "dead", ttl=30, prefix=prefix)
    acquired: list[float] = []

    def wait() -> None:
        assert live.acquire(blocking=True, timeout=60)
        acquired.append(time.monotonic())
        live.release()

    thread = threading.Thread(target=wait)
    thread.start()
    wait_for(lambda: len(holder.waiters()) == 2, message="C to queue behind B")
    assert dead.pid is not None
    os.kill(dead.pid, signal.SIGKILL)
    dead.join(10)
    assert dead.exitcode == -signal.SIGKILL
    return holder, acquired, thread


def test_slot_handed_to_a_just_killed_waiter_comes_back_within_its_ttl(
    redis_url: str, redis_client: Any, prefix: str
) -> None:
    """Released right after B died: the slot may go to dead B (its queue
    entry is still live), but C must have it within about B's ttl (0.5 s),
    not at its routine re-check 2.5 s later (the old behaviour)."""
    holder, acquired, thread = _queue_dead_waiter_then_live_one(redis_url, redis_client, prefix)
    released_at = time.monotonic()
    holder.release()
    thread.join(30)
    assert acquired, "C never acquired"
    assert acquired[0] - released_at < 1.5, f"C waited {acquired[0] - released_at:.2f} s"


def test_waiter_known_dead_is_skipped_by_the_hand_off(
    redis_url: str, redis_client: Any, prefix: str
) -> None:
    """B's queue entry lapses within about its ttl (not 5 s later), and a
    release after that hands the slot straight to C."""
    holder, acquired, thread = _queue_dead_waiter_then_live_one(redis_url, redis_client, prefix)
    wait_for(
        lambda: len(holder.waiters()) == 1,
        timeout=2.2,
        interval=0.05,
        message="dead B's queue entry to lapse",
    )
    released_at = time.monotonic()
    holder.release()
    thread.join(30)
    assert acquired and acquired[0] - released_at < 1.0


def _queue_raw(client: Any, lock: LeaseSet, owner: str, ttl_ms: int) -> None:
    """Queue ``owner`` the way acquire() does, and never come back (a waiter
    that died right after queueing, its queue entry still live)."""
    limit, _, wait_ms = lock._constant_args
    args = [owner, limit, ttl_ms, "{}", "1", wait_ms]
    assert ACQUIRE(client, lock._script_keys, args) < 0


def test_waiter_behind_a_short_lease_hand_off_is_nudged(redis_client: Any, prefix: str) -> None:
    """The slot goes to a queued waiter with a 0.5 s ttl that never comes
    back; the live waiter behind it, asleep for up to 2.5 s, is told to ask
    again and has the slot about 0.5 s after the release."""
    holder = RedisLock(redis_client, "nudge", ttl=30, prefix=prefix)
    assert holder.acquire()
    _queue_raw(redis_client, holder, "gone", 500)
    live = RedisLock(redis_client, "nudge", ttl=30, prefix=prefix)
    thread, acquired = _acquire_in_thread(live)
    wait_for(lambda: len(holder.waiters()) == 2, message="live waiter to queue")
    released_at = time.monotonic()
    holder.release()
    assert [h.owner for h in holder.holders()] == ["gone"]  # its entry was live
    thread.join(30)
    assert acquired and acquired[0] - released_at < 1.5, acquired
    redis_client.delete(holder.keys.wake("gone"))


def _acquire_in_thread(lock: LeaseSet) -> tuple[threading.Thread, list[float]]:
    acquired: list[float] = []

    def wait() -> None:
        assert lock.acquire(blocking=True, timeout=60)
        acquired.append(time.monotonic())
        lock.release()

    thread = threading.Thread(target=wait)
    thread.start()
    return thread, acquired


def test_keys_outlive_a_lease_handed_off_by_a_park_release(redis_client: Any, prefix: str) -> None:
    """A park release that hands the freed slot to a queued waiter (another
    policy's blocking acquire on the same key) and promotes nothing must fit
    the holder keys' TTLs to the waiter's new lease: the keys of a live lease
    never expire before it (its token, limit and meta live in the info hash)."""
    from celery_redislock.core.capacity import Capacity
    from celery_redislock.core.park import ParkConfig, Parking

    one = Capacity.semaphore(1)
    parking = Parking(redis_client, prefix, "handed")
    keys = parking.keys.script_keys()
    assert ACQUIRE(redis_client, keys, ["short", one.encoded, 3000, "{}", "0", 60000]) > 0
    assert ACQUIRE(redis_client, keys, ["long", one.encoded, 60000, "{}", "1", 60000]) < 0
    assert parking.enqueue("t1", one, "{}", 0, ParkConfig()).count == 1  # the name is full
    held, promotions = parking.release("short", one, ParkConfig())
    assert held and promotions == []  # the waiter took the slot: nothing promoted
    assert redis_client.zscore(parking.keys.holders, "long") is not None
    assert redis_client.pttl(parking.keys.holders) > 30_000
    assert redis_client.pttl(parking.keys.info) > 30_000


def test_park_grants_keep_the_holder_keys_alive_past_every_lease(
    redis_client: Any, prefix: str
) -> None:
    """A park grant extends the holder keys only when they would not outlive
    it (includes/outlive_grants.lua), by at most 5 s more, never shortens
    them below a longer lease already there, and gives keys a claim emptied
    and made anew in one call (the reservation gone, the lease added) a TTL;
    the info hash always lives as long as the holders zset.  An info hash
    lost while holders remain admits no newcomer (its holders count as lock
    holders), so no grant can leave it without a TTL."""
    from celery_redislock.core.capacity import Capacity
    from celery_redislock.core.park import ParkConfig, Parking, Verdict

    two = Capacity.semaphore(2)
    parking = Parking(redis_client, prefix, "outlive")
    holders, info = parking.keys.holders, parking.keys.info

    def ttls() -> tuple[int, int]:
        return redis_client.pttl(holders), redis_client.pttl(info)

    only = parking.enqueue("r0", two, "{}", 0, ParkConfig(deadline=60))
    assert only.token and 60_000 - 1_000 <= ttls()[0] <= 65_000
    # its claim removes the only holder (the zset goes) and adds the lease
    assert parking.claim("r0", str(only.token), "o0", 10, "{}", two, "t").token > 0
    holders_ttl, info_ttl = ttls()
    assert 10_000 - 1_000 <= holders_ttl <= 15_000 and abs(info_ttl - holders_ttl) <= 50
    # a reservation of 60 s beside it extends both; a 10 s lease after it shortens nothing
    reserved = parking.enqueue("r1", two, "{}", 0, ParkConfig(deadline=60))
    assert reserved.token and 60_000 - 1_000 <= ttls()[0] <= 65_000
    assert parking.release("o0", two, ParkConfig())[0]
    other = parking.enqueue("r2", two, "{}", 0, ParkConfig(deadline=60))
    assert parking.claim("r2", str(other.token), "o2", 10, "{}", two, "t").token > 0
    holders_ttl, info_ttl = ttls()
    assert holders_ttl > 55_000 and abs(info_ttl - holders_ttl) <= 50
    # a lease beyond the keys' TTL extends both, by at most 5 s more
    assert parking.release("o2", two, ParkConfig())[0]
    third = parking.enqueue("r3", two, "{}", 0, ParkConfig(deadline=60))
    assert parking.claim("r3", str(third.token), "o3", 120, "{}", two, "t").token > 0
    holders_ttl, info_ttl = ttls()
    assert 120_000 - 1_000 <= holders_ttl <= 125_000 and abs(info_ttl - holders_ttl) <= 50
    # the info hash lost while holders remain: no newcomer is admitted
    redis_client.delete(info)
    assert parking.enqueue("r4", two, "{}", 0, ParkConfig()).verdict is Verdict.PARKED


def test_a_second_release_of_one_owner_frees_and_promotes_nothing(
    redis_client: Any, prefix: str
) -> None:
    """Solid Queue #761: a double release let a limit-1 job run 11 times.
    The release of an owner that no longer holds (a child that released and
    then died, its main process releasing again) frees no slot and promotes
    nothing, so the limit stays whole: one holder and one task in flight."""
    from celery_redislock.core.capacity import Capacity
    from celery_redislock.core.park import ParkConfig, Parking

    one, config = Capacity.semaphore(1), ParkConfig(deadline=30)
    parking = Parking(redis_client, prefix, "twice")
    first = parking.enqueue("t1", one, "{}", 0, config, "task")
    for task_id in ("t2", "t3", "t4"):
        assert parking.enqueue(task_id, one, "{}", 0, config, "task").count >= 1
    held = parking.claim("t1", str(first.token), "owner.1", 30, "{}", one, "task")
    assert held.token > 0
    released, promotions = parking.release("owner.1", one, config, "task")
    assert released and [p.task_id for p in promotions] == ["t2"]
    again, more = parking.release("owner.1", one, config, "task")
    assert (again, more) == (False, [])
    status = parking.status()
    assert status.parked == 2 and status.in_flight == 1  # t3, t4 still wait; t2 alone
    lock = FairSemaphore(redis_client, "twice", 1, prefix=prefix)
    assert not lock.acquire(blocking=False)  # t2's reservation fills the limit


def test_a_second_release_of_a_semaphore_slot_hands_on_nothing(
    redis_client: Any, prefix: str
) -> None:
    """The same for the primitives: a second ``release()`` of a slot that was
    handed to the next waiter raises and wakes nobody else."""
    holder = FairSemaphore(redis_client, "twice-s", 1, ttl=10, prefix=prefix)
    assert holder.acquire()
    lease = holder.lease
    assert lease is not None
    got: list[bool] = []
    waiters = [FairSemaphore(redis_client, "twice-s", 1, ttl=10, prefix=prefix) for _ in range(3)]
    threads = [
        threading.Thread(target=lambda w=w: got.append(w.acquire(timeout=3))) for w in waiters
    ]
    for n, thread in enumerate(threads, start=1):
        thread.start()
        wait_for(lambda n=n: len(holder.waiters()) == n, 30, message=f"waiter {n} queued")
    holder.release()
    wait_for(lambda: sum(w.owned() for w in waiters) == 1, 30, message="one waiter served")
    with pytest.raises(NotOwned):
        holder.release()
    for thread in threads:
        thread.join(30)
    assert sorted(got) == [False, False, True]  # the others timed out: nothing handed on
    for waiter in waiters:
        if waiter.owned():
            waiter.release()


def test_a_waiter_rides_out_a_stall_longer_than_its_socket_timeout(own_redis: Any) -> None:
    """Redis stalls (SIGSTOP) for longer than the client's socket timeout
    while a waiter blocks on its wake list (``BLPOP``): the waiter holds
    nothing, and a hand-off made meanwhile shows as its own when it asks
    again, so it asks again when Redis answers instead of failing (a holder
    rides the same stall out); it gets the lock at the holder's release.  A
    Redis that still does not answer fails that next ask (fail closed)."""
    from celery_redislock.core.connection import client_from_url

    client = client_from_url(f"{own_redis.url}?socket_timeout=6")
    holder = RedisLock(client, "stall", ttl=30)
    assert holder.acquire()
    outcome: dict[str, Any] = {}

    def wait() -> None:
        waiter = RedisLock(client, "stall", ttl=30)
        try:
            outcome["got"] = waiter.acquire(blocking=True, timeout=60)
            waiter.release()
        except Exception as exc:  # the outcome is what the test asserts
            outcome["error"] = exc

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    admin = redis.Redis.from_url(own_redis.url)
    wait_for(  # a BLPOP that just started: the stall falls inside it
        lambda: any(c["cmd"] == "blpop" and int(c["idle"]) == 0 for c in admin.client_list()),
        10,
        message="the waiter blocked",
    )
    own_redis.pause()
    try:
        time.sleep(7)  # the fault itself: longer than the 6 s socket timeout
    finally:
        own_redis.resume()
    holder.release()
    thread.join(60)
    assert outcome == {"got": True}
