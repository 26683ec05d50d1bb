"""Run-time overrides (core/override.py) against a real Redis: a semaphore's
limit raised and lowered, a lock never shared, a rate replaced for the
limiter and for parked work, and precise errors for bad input."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from celery_redislock import FairSemaphore, Overrides, RateLimiter, RedisLock
from celery_redislock.core.capacity import Capacity
from celery_redislock.core.park import ParkConfig, Parking, indexed_names
from celery_redislock.core.rate import RateTerms, parse_rate


@pytest.fixture
def name() -> str:
    return f"ovr-{uuid.uuid4().hex[:10]}"


def test_a_lowered_limit_holds_new_holders_and_clear_restores_the_codes(
    redis_client: Any, prefix: str, name: str
) -> None:
    slots = [FairSemaphore(redis_client, name, 3, ttl=10, prefix=prefix) for _ in range(3)]
    Overrides(redis_client, name, prefix).set(limit=1)
    assert slots[0].acquire(blocking=False)
    assert not slots[1].acquire(blocking=False)
    assert Overrides(redis_client, name, prefix).clear().limit is None
    assert slots[1].acquire(blocking=False) and slots[2].acquire(blocking=False)
    for s in slots:
        s.release()


def test_a_raised_limit_admits_more_holders(redis_client: Any, prefix: str, name: str) -> None:
    Overrides(redis_client, name, prefix).set(limit=3)
    slots = [FairSemaphore(redis_client, name, 1, ttl=10, prefix=prefix) for _ in range(4)]
    assert [s.acquire(blocking=False) for s in slots] == [True, True, True, False]
    for s in slots[:3]:
        s.release()


def test_a_lock_is_never_shared_whatever_the_override(
    redis_client: Any, prefix: str, name: str
) -> None:
    Overrides(redis_client, name, prefix).set(limit=5)
    first = RedisLock(redis_client, name, ttl=10, prefix=prefix)
    second = RedisLock(redis_client, name, ttl=10, prefix=prefix)
    assert first.acquire(blocking=False)
    assert not second.acquire(blocking=False)
    # A semaphore beside the lock holder is kept out by the lock's own limit too.
    assert not FairSemaphore(redis_client, name, 5, ttl=10, prefix=prefix).acquire(blocking=False)
    first.release()


def test_a_rate_override_replaces_the_limiters_rate_and_burst(
    redis_client: Any, prefix: str, name: str
) -> None:
    limiter = RateLimiter(redis_client, name, rate="1/h", burst=1, prefix=prefix)
    assert limiter.try_acquire() and not limiter.try_acquire()
    Overrides(redis_client, name, prefix).set(rate="1/h", burst=3)
    # Same hour-long interval, but a burst of 3: two more fit right away.
    assert limiter.try_acquire() and limiter.try_acquire() and not limiter.try_acquire()
    Overrides(redis_client, name, prefix).clear("rate")
    decision = limiter.try_acquire()
    assert not decision and decision.retry_after > 3000  # the code's 1/h again


def test_a_raised_rate_applies_from_the_next_start_not_after_the_old_rates_schedule(
    redis_client: Any, prefix: str, name: str
) -> None:
    """A start under the code's 1/min books the next one a minute ahead;
    ``limit set --rate 100/s`` cuts that schedule to a full burst of the new
    rate, so the next start waits at most one new interval (10 ms), not the
    minute.  A lowered rate keeps what was booked: the next start goes at
    the old schedule's time, the ones after it by the new rate."""
    limiter = RateLimiter(redis_client, name, rate="1/m", burst=1, prefix=prefix)
    assert limiter.try_acquire()
    assert limiter.peek().retry_after > 30
    Overrides(redis_client, name, prefix).set(rate="100/s")
    assert limiter.peek().retry_after <= 0.01
    assert limiter.acquire(blocking_timeout=5)
    Overrides(redis_client, name, prefix).set(rate="1/h")
    assert limiter.peek().retry_after <= 0.01  # booked under 100/s
    assert limiter.acquire(blocking_timeout=5)
    assert limiter.peek().retry_after > 3000  # the new 1/h from there on


def test_a_cost_above_an_overriding_burst_counts_as_the_whole_burst(
    redis_client: Any, prefix: str, name: str
) -> None:
    limiter = RateLimiter(redis_client, name, rate="1/h", burst=4, prefix=prefix)
    Overrides(redis_client, name, prefix).set(rate="1/h", burst=2)
    assert limiter.try_acquire(4)  # admitted as a cost of 2, not refused forever
    assert not limiter.try_acquire(1)


def test_the_override_reads_back_as_set(redis_client: Any, prefix: str, name: str) -> None:
    overrides = Overrides(redis_client, name, prefix)
    assert not overrides.get()
    overrides.set(limit=7)
    overrides.set(rate="500/m", burst=5)  # what is not given stays
    got = overrides.get()
    assert (got.limit, got.rate, got.burst) == (7, parse_rate("500/m"), 5)
    assert str(got) == "limit 7, rate 500/m burst 5"
    assert overrides.clear("limit") == overrides.get() and overrides.get().limit is None
    overrides.clear()
    assert redis_client.exists(f"{prefix}:{{{name}}}:override") == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "give a limit"),
        ({"limit": 0}, ValueError, "limit must be"),
        ({"limit": "5"}, TypeError, "limit must be"),
        ({"rate": "fast"}, ValueError, "must look"),
        ({"rate": 0}, ValueError, "positive"),
        ({"rate": "5/s", "burst": 0}, ValueError, "burst"),
    ],
)
def test_bad_overrides_are_refused_before_anything_is_stored(
    redis_client: Any, prefix: str, name: str, kwargs: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        Overrides(redis_client, name, prefix).set(**kwargs)
    with pytest.raises(ValueError, match="one of"):
        Overrides(redis_client, name, prefix).clear("everything")
    assert redis_client.exists(f"{prefix}:{{{name}}}:override") == 0


def test_parked_work_is_promoted_by_a_raised_limit_and_locks_stay_alone(
    redis_client: Any, prefix: str, name: str
) -> None:
    park = Parking(redis_client, prefix, name)
    config = ParkConfig(deadline=30)
    assert park.enqueue("s1", Capacity.semaphore(1), "{}", 0, config, "sem").token > 0
    assert park.enqueue("s2", Capacity.semaphore(1), "{}", 0, config, "sem").count == 1
    assert park.enqueue("s3", Capacity.semaphore(1), "{}", 0, config, "sem").count == 2
    Overrides(redis_client, name, prefix).set(limit=2)
    assert name in indexed_names(redis_client, prefix)
    # The sweeper (limit 0, no task name) admits each entry by its own limit as
    # resolved now: one more slot, so s2 goes.
    assert [p.task_id for p in park.promote(None, config)] == ["s2"]

    lock_name = f"{name}-lock"
    lock_park = Parking(redis_client, prefix, lock_name)
    assert lock_park.enqueue("l1", Capacity.lock(), "{}", 0, config, "lock").token > 0
    assert lock_park.enqueue("l2", Capacity.lock(), "{}", 0, config, "lock").count == 1
    Overrides(redis_client, lock_name, prefix).set(limit=5)
    assert lock_park.promote(None, config) == []  # a lock's limit is fixed


def test_a_rate_override_spaces_parked_work_by_the_new_rate(
    redis_client: Any, prefix: str, name: str
) -> None:
    park = Parking(redis_client, prefix, name)
    config = ParkConfig(deadline=30)
    hourly = RateTerms(parse_rate("1/h"))
    first = park.enqueue("r1", Capacity.semaphore(1000), "{}", 0, config, "rated", hourly)
    assert first.token > 0
    assert park.enqueue("r2", Capacity.semaphore(1000), "{}", 0, config, "rated", hourly).count == 1
    assert park.status().head_due_in > 3000  # an hour away at the code's rate
    Overrides(redis_client, name, prefix).set(rate="1/h", burst=2)
    assert park.status().head_due_in == 0
    assert [p.task_id for p in park.promote(None, config)] == ["r2"]


def test_a_raised_limit_applies_beside_holders_admitted_under_the_old_one(
    redis_client: Any, prefix: str, name: str
) -> None:
    """Holders store their limit as passed and every admission resolves it, so
    the new slots fill at once, not when the old holders have gone."""
    slots = [FairSemaphore(redis_client, name, 2, ttl=10, prefix=prefix) for _ in range(4)]
    assert [s.acquire(blocking=False) for s in slots[:3]] == [True, True, False]
    Overrides(redis_client, name, prefix).set(limit=3)
    assert slots[2].acquire(blocking=False) and not slots[3].acquire(blocking=False)
    Overrides(redis_client, name, prefix).set(limit=1)
    assert not slots[3].acquire(blocking=False)
    Overrides(redis_client, name, prefix).clear()  # the code's 2 again: still 3 in
    assert not slots[3].acquire(blocking=False)
    slots[0].release()
    slots[1].release()
    assert slots[3].acquire(blocking=False)
    assert [h.limit for h in slots[3].holders()] == [2, 2]


def test_every_kind_is_stored_and_read_back_as_itself(
    redis_client: Any, prefix: str, name: str
) -> None:
    """Capacity (core/capacity.py) is the one place that encodes a kind as
    the scripts' integer: what a holder stored reads back as its kind, and a
    run-time override changes a semaphore's limit and never a lock's."""
    kinds = [Capacity.lock(), Capacity.semaphore(4), Capacity.rate()]
    assert [Capacity.decoded(c.encoded) for c in kinds] == kinds
    assert [c.limit for c in kinds] == [1, 4, None]
    with pytest.raises(ValueError, match="at least one slot"):
        Capacity.semaphore(0)
    locks = [RedisLock(redis_client, f"{name}-l", ttl=10, prefix=prefix) for _ in range(2)]
    slots = [FairSemaphore(redis_client, f"{name}-s", 1, ttl=10, prefix=prefix) for _ in range(2)]
    assert locks[0].capacity == Capacity.lock() and slots[0].capacity == Capacity.semaphore(1)
    assert locks[0].acquire() and slots[0].acquire()
    Overrides(redis_client, f"{name}-l", prefix).set(limit=3)
    Overrides(redis_client, f"{name}-s", prefix).set(limit=3)
    assert not locks[1].acquire(blocking=False) and slots[1].acquire(blocking=False)
    assert [h.capacity for h in locks[0].holders()] == [Capacity.lock()]
    assert [h.capacity for h in slots[0].holders()] == [Capacity.semaphore(1)] * 2  # as asked
    locks[0].release()
    for s in slots:
        s.release()
