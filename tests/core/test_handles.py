"""The lock object: ``blocking_timeout`` is acquire()'s default (as in
redis-py's Lock), and a lock object dropped while held is not renewed."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from celery_redislock import FairSemaphore, RedisLock
from celery_redislock.core import leaseset
from celery_redislock.core.heartbeat import Heartbeat
from tests.waiting import wait_for


def _in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    return thread, result


def test_lock_acquire_waits_blocking_timeout_by_default(redis_client: Any, prefix: str) -> None:
    holder = RedisLock(redis_client, "bt", ttl=30, prefix=prefix)
    assert holder.acquire()
    lock = RedisLock(redis_client, "bt", ttl=30, prefix=prefix, blocking_timeout=0.4)
    started = time.monotonic()
    thread, result = _in_thread(lock.acquire)
    thread.join(10)
    try:
        assert not thread.is_alive(), "acquire() ignored blocking_timeout and blocks on"
        assert result == [False]
        assert time.monotonic() - started >= 0.4
        assert not holder.waiters()  # it gave its queue place back
    finally:
        holder.release()
        thread.join(10)
        if lock.owned():
            lock.release()


@pytest.mark.parametrize(
    ("kind", "timeout"),
    [
        # timeout=None: forever, whatever the constructor said
        ("a lock that waits 30 s by default", None),
        # a timeout alone waits that long, also on a FairSemaphore, which does
        # not wait by default (threading.Semaphore.acquire(timeout=) waits too)
        ("a semaphore that does not wait by default", 30),
    ],
)
def test_explicit_arguments_override_blocking_timeout(
    redis_client: Any, prefix: str, kind: str, timeout: float | None
) -> None:
    def make() -> Any:
        if kind.startswith("a lock"):
            return RedisLock(redis_client, "bt2", ttl=30, prefix=prefix, blocking_timeout=30)
        return FairSemaphore(redis_client, "bt2", 1, ttl=30, prefix=prefix)

    holder = make()
    assert holder.acquire(blocking=False)
    lock = make()
    assert lock.acquire(blocking=False) is False
    assert lock.acquire(timeout=0.05) is False
    thread, result = _in_thread(lambda: lock.acquire(timeout=timeout))  # woken by the release
    wait_for(lambda: holder.waiters(), message="waiter to queue")
    holder.release()
    thread.join(10)
    assert result == [True]
    lock.release()
    with pytest.raises(ValueError, match="blocking acquires only"):
        lock.acquire(blocking=False, timeout=1)


def test_semaphore_acquire_waits_blocking_timeout_by_default(
    redis_client: Any, prefix: str
) -> None:
    holder = FairSemaphore(redis_client, "sbt", 1, ttl=30, prefix=prefix)
    assert holder.acquire()
    sem = FairSemaphore(redis_client, "sbt", 1, ttl=30, prefix=prefix, blocking_timeout=20)
    thread, result = _in_thread(sem.acquire)
    wait_for(lambda: holder.waiters() or result, message="semaphore to queue")
    assert result == [], "acquire() did not wait although blocking_timeout=20"
    holder.release()
    thread.join(10)
    assert result == [True]
    sem.release()
    # The default (blocking_timeout=0) stays non-blocking.
    assert holder.acquire()
    assert FairSemaphore(redis_client, "sbt", 1, prefix=prefix).acquire() is False
    holder.release()


@pytest.fixture
def own_renewer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Heartbeat]:
    beat = Heartbeat()
    monkeypatch.setattr(leaseset.LeaseSet, "renewer", beat)
    yield beat
    beat.stop()


def _take_and_drop(redis_client: Any, prefix: str, name: str, ttl: float) -> str:
    lock = RedisLock(redis_client, name, ttl=ttl, prefix=prefix)
    assert lock.acquire()
    assert lock.lease is not None
    return lock.lease.owner  # the lock object is dropped on return


def test_dropped_lock_object_is_not_renewed_forever(
    redis_client: Any, prefix: str, own_renewer: Heartbeat, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="celery_redislock")
    ttl = 1.0
    probe = RedisLock(redis_client, "dropped", ttl=5, prefix=prefix)
    owner = _take_and_drop(redis_client, prefix, "dropped", ttl)
    gc.collect()
    dropped_at = time.monotonic()
    assert [h.owner for h in probe.holders()] == [owner]
    wait_for(
        lambda: not probe.locked(),
        timeout=ttl + 2.0,
        interval=0.05,
        message="the dropped lock's lease to expire",
    )
    assert time.monotonic() - dropped_at < ttl + 2.0
    assert own_renewer.leases() == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'dropped'" in m and "garbage-collected" in m for m in warnings), warnings
    assert probe.acquire(blocking=False)
    probe.release()


def test_lock_object_kept_is_still_renewed(
    redis_client: Any, prefix: str, own_renewer: Heartbeat
) -> None:
    # The weak reference must not drop a lock that is merely unused.  (A TTL of
    # 1.5 s: a renewal may come a second late on a loaded 2-core machine.)
    lock = RedisLock(redis_client, "kept", ttl=1.5, prefix=prefix)
    assert lock.acquire()
    gc.collect()
    beats = own_renewer.beats
    wait_for(lambda: own_renewer.beats >= beats + 6, timeout=30, message="six beats")
    assert lock.owned() and lock.locked()
    lock.release()
