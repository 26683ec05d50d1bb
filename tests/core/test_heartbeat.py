"""The per-process renewer: batching, fork safety, surviving Redis trouble."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from celery_redislock import RedisLock
from celery_redislock.core import heartbeat, leaseset
from celery_redislock.core.heartbeat import HEARTBEAT, Heartbeat
from celery_redislock.testing.servers import RedisServer
from tests.waiting import wait_for


def test_one_batched_call_per_beat_for_many_leases(own_redis: RedisServer) -> None:
    client = redis.Redis.from_url(own_redis.url)
    locks = [RedisLock(client, f"b{i}", ttl=0.9) for i in range(100)]
    for lock in locks:
        assert lock.acquire()
    client.config_resetstat()
    start = HEARTBEAT.beats
    wait_for(lambda: HEARTBEAT.beats >= start + 5, timeout=20, message="five beats")
    beats = HEARTBEAT.beats - start
    stats = client.info("commandstats")  # a script call is an FCALL or an EVALSHA (scripts.py)
    calls = sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("fcall", "evalsha"))
    assert beats <= calls <= beats + 1  # one refresh call per beat (one may be in flight)
    assert all(lock.owned() for lock in locks)
    for lock in locks:
        lock.release()


@pytest.fixture
def own_renewer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Heartbeat]:
    """A renewer of its own for the locks a test takes, so that leases other
    tests left in this process neither set its pace nor keep it awake."""
    beat = Heartbeat()
    monkeypatch.setattr(leaseset.LeaseSet, "renewer", beat)
    yield beat
    beat.stop()


def test_lease_taken_while_the_renewer_idles_is_renewed(
    redis_client: Any, prefix: str, own_renewer: Heartbeat
) -> None:
    # After the last lease is released the renewer keeps its pace without
    # being woken by add(); a lease taken then must still be renewed in time,
    # also one with a shorter ttl than the pace it kept.
    beat = own_renewer
    for ttl in (0.6, 0.3):
        warm = RedisLock(redis_client, "idle-warm", ttl=0.6, prefix=prefix)
        assert warm.acquire()
        warm.release()  # the renewer now idles at the 0.6 s pace
        lock = RedisLock(redis_client, "idle", ttl=ttl, prefix=prefix)
        assert lock.acquire()
        beats = beat.beats
        wait_for(lambda b=beats: beat.beats >= b + 4, timeout=20, message="four beats")
        assert lock.owned()
        holder = lock.holders()
        assert [h.owner for h in holder] == [lock.lease.owner]  # type: ignore[union-attr]
        assert holder[0].expires_in > 0
        lock.release()


def test_acquire_release_loop_wakes_the_sleeping_renewer_once(
    redis_client: Any, prefix: str, own_renewer: Heartbeat, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once asleep (idle longer than IDLE_TICKING), the renewer is woken by the
    # next add() and must then keep ticking: a loop of acquire/release must
    # not wake it at every acquire (a thread switch each time).
    beat = own_renewer
    monkeypatch.setattr(heartbeat, "IDLE_TICKING", 1.0)
    lock = RedisLock(redis_client, "wake-once", ttl=5, prefix=prefix)
    assert lock.acquire()
    lock.release()
    wait_for(lambda: beat._scheduled_ttl == float("inf"), timeout=10, message="asleep")
    wakes = []
    notify_all = beat._cond.notify_all
    monkeypatch.setattr(beat._cond, "notify_all", lambda: (wakes.append(1), notify_all()))
    for _ in range(100):
        assert lock.acquire()
        lock.release()
    assert len(wakes) == 1


def test_forked_child_does_not_renew_parent_leases(redis_client: Any, prefix: str) -> None:
    lock = RedisLock(redis_client, "fork", ttl=5, prefix=prefix)
    assert lock.acquire()
    assert lock.lease in HEARTBEAT.leases()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os._exit(0 if HEARTBEAT.leases() == [] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert lock.lease in HEARTBEAT.leases()
    lock.release()


def test_renewer_survives_a_paused_redis(own_redis: RedisServer) -> None:
    client = redis.Redis.from_url(own_redis.url, socket_timeout=0.3)
    lock = RedisLock(client, "pause", ttl=6)
    assert lock.acquire()
    own_redis.pause()
    try:
        start = HEARTBEAT.beats
        wait_for(lambda: HEARTBEAT.beats >= start + 1, timeout=10, message="a failed beat")
    finally:
        own_redis.resume()
    start = HEARTBEAT.beats
    wait_for(lambda: HEARTBEAT.beats >= start + 2, timeout=15, message="beats after resume")
    assert lock.owned()
    assert lock.holders()[0].expires_in > 6 - 2.5  # renewed since the pause
    lock.release()


def test_pause_longer_than_ttl_is_reported_from_the_local_deadline(
    own_redis: RedisServer,
) -> None:
    lost: list[str] = []
    client = redis.Redis.from_url(own_redis.url, socket_timeout=10)
    lock = RedisLock(client, "hang", ttl=1.5, on_lost=lambda lease: lost.append("x"))
    assert lock.acquire()
    own_redis.pause()
    try:
        paused_at = time.monotonic()
        # renewals hang (socket_timeout 10 s), yet the loss is reported at the TTL
        wait_for(lambda: lost, timeout=5, message="loss reported while Redis hangs")
        assert time.monotonic() - paused_at < 5
        assert not lock.owned()
    finally:
        own_redis.resume()
    assert lock.lease is not None and "not confirmed" in (lock.lease.lost_reason or "")


def test_owned_does_not_wait_for_a_redis_that_hangs(own_redis: RedisServer) -> None:
    """Past its local deadline ``owned()`` asks Redis, but waits ``ttl / 3`` at
    most for the answer: a body that checks it is not held for the client's
    socket timeout (30 s here) while Redis hangs."""
    client = redis.Redis.from_url(own_redis.url, socket_timeout=30)
    lock = RedisLock(client, "hang-owned", ttl=1.5)
    assert lock.acquire()
    lease = lock.lease
    assert lease is not None
    own_redis.pause()
    try:
        deadline = time.monotonic() + 10
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lease.lost and lease.lost_reason == "not renewed within its ttl"  # not reported yet
        asked_at = time.monotonic()
        assert not lock.owned()
        assert time.monotonic() - asked_at < 10  # grace 0.5 s; the socket timeout is 30 s
        time.sleep(lease.grace)  # a second question while the first still hangs: not sent
        assert not lock.owned()
        assert [t.name for t in threading.enumerate()].count("redislock-recheck") == 1
    finally:
        own_redis.resume()


def test_lease_lost_when_redis_restarts_empty(own_redis: RedisServer) -> None:
    client = redis.Redis.from_url(own_redis.url)
    lost: list[str] = []
    lock = RedisLock(client, "restart", ttl=3, on_lost=lambda lease: lost.append(lease.name))
    assert lock.acquire()
    own_redis.restart()
    wait_for(lambda: lost, timeout=3, message="loss after restart")
    assert lost == ["restart"]


def test_two_clients_of_one_redis_state_their_holdings_together(
    redis_url: str, prefix: str
) -> None:
    """A process holding leases through two clients of one Redis and prefix
    (the Celery layer's and a body's own) writes one statement for both: the
    release of one client's last lease must not erase the other's (it did,
    until the next statement: the holder read as silent, and the dead-holder
    path could not see it)."""
    from celery_redislock.core import liveness

    space, me = liveness.process_space(), liveness.identity()
    if space is None or me is None:
        pytest.skip("statements need Linux's /proc (a process space)")
    first, second = redis.Redis.from_url(redis_url), redis.Redis.from_url(redis_url)
    kept = RedisLock(first, "kept", prefix=prefix, ttl=30)
    brief = RedisLock(second, "brief", prefix=prefix, ttl=30)
    assert kept.acquire() and brief.acquire()
    recorder = liveness.Recorder()
    try:
        recorder.state(space, me, [kept.lease, brief.lease])  # type: ignore[list-item]
        [record] = [r for p, _, r in liveness._statements(first, prefix, space) if p == me]
        assert sorted(json.loads(record)) == ["brief", "kept"]  # one record names both
        brief.release()
        recorder.state(space, me, [kept.lease])  # type: ignore[list-item]
        stated = liveness.last_statements(first, prefix, [f"{space}/{me}"])
        assert f"{space}/{me}" in stated
    finally:
        liveness.forget(first, prefix, me)
        kept.release()
