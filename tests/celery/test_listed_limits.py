"""Several limits on one task: ``limits=[Limit(...)]`` beside the own key.

Decoration-time and call-time checks; a run that holds all of its limits or
none (in-process ``apply()`` against the real Redis); and on real prefork
workers: a per-account cap plus a shared cap never exceeded, the shared cap
used, a refusal that names the shared limit, the shared limit lowered at run
time, and a child kill and a whole-worker kill while a run holds both.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import (
    FairSemaphore,
    Limit,
    LockContended,
    LockedTask,
    Overrides,
    RedisLock,
    SemaphoreTask,
)
from celery_redislock.admin.format import format_parked
from celery_redislock.core.park import Parking
from celery_redislock.parking.admin import revoke as park_revoke
from celery_redislock.testing.servers import free_port
from tests.celery.test_rate import cli
from tests.celery_apps.listed import REGION, SHARED, SLOW, create_listed_app
from tests.celery_harness import worker_factory
from tests.waiting import wait_for


@pytest.fixture
def app(redis_url: str, prefix: str) -> Celery:
    app = Celery("listed", broker="memory://", set_as_current=False)
    app.conf.update(redislock_url=redis_url, redislock_prefix=prefix)
    app.finalize()
    return app


def unique_name() -> str:
    return f"listed.{uuid.uuid4().hex}"


def holders(client: redis.Redis, prefix: str, name: str) -> list[Any]:
    return FairSemaphore(client, name, 1, prefix=prefix).holders()


def wait_nothing_held(client: redis.Redis, prefix: str, *names: str, timeout: float = 30) -> None:
    wait_for(
        lambda: not any(holders(client, prefix, name) for name in names),
        timeout,
        message=f"nothing held of {names}",
    )


# -- decoration and call time --------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"limits": Limit("s", 2)}, TypeError, "limits must be a list of Limit"),
        ({"limits": [("s", 2)]}, TypeError, "got an item"),
        ({"limits": [Limit("r:{regoin}", 2)]}, ValueError, r"\{regoin\} is not a parameter"),
        ({"limits": [Limit("s", lambda plan: 2)]}, ValueError, "'plan' is not a parameter"),
        ({"limits": [Limit("s", 2), Limit("s", 3)]}, ValueError, "names 's' twice"),
        ({"limits": [Limit("a:{account_id}", 2)]}, ValueError, "the task's own key"),
    ],
)
def test_bad_limits_fail_at_decoration_naming_the_task(
    app: Celery, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    name = unique_name()
    options.setdefault("lock_policy", "retry")
    with pytest.raises(error, match=match) as info:

        @app.task(
            name=name,
            shared=False,
            base=SemaphoreTask,
            semaphore_key="a:{account_id}",
            semaphore_limit=2,
            **options,
        )
        def sync(account_id: int, region: str = "eu") -> None: ...

    assert name in str(info.value)


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"key": ""}, TypeError, "non-empty str template"),
        ({"limit": 0}, ValueError, "must be >= 1"),
        ({"limit": True}, TypeError, "must be an int >= 1"),
        ({"rate": "fast"}, ValueError, "rate"),
        ({"burst": 0}, ValueError, "burst"),
        ({"burst": 5}, ValueError, "burst=5 needs a rate"),
    ],
)
def test_a_bad_limit_fails_when_it_is_made(
    arguments: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Limit(**{"key": "s", "limit": 2, **arguments})


def test_semaphore_task_takes_limits_with_its_default_policy_park(app: Celery) -> None:
    @app.task(
        name=unique_name(),
        shared=False,
        base=SemaphoreTask,
        semaphore_key="a:{account_id}",
        semaphore_limit=2,
        limits=[Limit("s", 2)],
    )
    def sync(account_id: int) -> None: ...

    assert sync.lock_policy == "park"
    assert [listed.keys.build((1,), {}) for listed in type(sync)._redislock_listed] == ["s"]


def test_wait_combines_with_limits_per_task_and_per_call(app: Celery) -> None:
    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="wait",
        limits=[Limit("s", 2)],
    )
    def report(account_id: int) -> None: ...

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        limits=[Limit("s", 2)],
    )
    def other(account_id: int) -> None: ...

    assert report.lock_policy == "wait"
    assert other.apply_async((1,), lock_policy="wait").id


# -- one run, all or none (in process, real Redis) --------------------------------


def test_a_run_holds_its_own_key_and_every_listed_limit_and_gives_all_back(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    seen: dict[str, Any] = {}

    @app.task(
        name=unique_name(),
        shared=False,
        bind=True,
        base=LockedTask,
        lock_key="r:{account_id}",
        limits=[Limit("region:{region}", 5), Limit("s", lambda account_id: account_id)],
    )
    def report(self: Any, account_id: int, region: str) -> None:
        seen["listed"] = sorted(lease.name for lease in self.request.redislock_listed)
        seen["held"] = {
            name: [h.meta.get("task_id") for h in holders(redis_client, prefix, name)]
            for name in ("r:2", "region:eu", "s")
        }
        seen["limit"] = [h.meta.get("limit") for h in holders(redis_client, prefix, "s")]

    result = report.apply((2, "eu"))
    assert result.successful(), result.traceback
    assert seen["listed"] == ["region:eu", "s"]
    assert seen["held"] == {name: [result.id] for name in ("r:2", "region:eu", "s")}
    assert seen["limit"] == [2]  # the callable's answer for this call
    for name in ("r:2", "region:eu", "s"):
        assert holders(redis_client, prefix, name) == [], name


@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_a_full_listed_limit_refuses_the_run_which_holds_nothing(
    app: Celery,
    redis_client: redis.Redis,
    prefix: str,
    policy: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[int] = []

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy=policy,
        limits=[Limit("a-free", 1), Limit("z-full", 1)],  # taken in this order
    )
    def report(account_id: int) -> None:
        ran.append(account_id)

    other = FairSemaphore(redis_client, "z-full", 1, prefix=prefix)
    assert other.acquire(blocking=False)
    try:
        result = report.apply((1,))
    finally:
        other.release()
    assert ran == []
    if policy == "raise":
        assert isinstance(result.result, LockContended)
        assert "listed limit 'z-full' is full" in str(result.result)
    else:  # eager: Celery's IGNORED; a worker stores SKIPPED (policies/skip.py)
        assert result.state == "IGNORED"
        assert "skipped: listed limit 'z-full' is full (policy skip)" in caplog.text
    for name in ("r:1", "a-free", "z-full"):
        assert holders(redis_client, prefix, name) == [], name


def _park_one_noted_for(
    redis_client: redis.Redis, prefix: str, waiting: Any, arg: Any, key: str, limit: str
) -> Any:
    """Park one call ``waiting.delay(arg)`` on its full key ``key`` (limit 1),
    hold the key's parked work for listed limit ``limit`` and note the key in
    the limit's blocked set, the state a run refused by the full ``limit``
    leaves, with ``limit`` free again (given back without a wake-up).
    Returns the parked call's result."""
    from celery_redislock.core.keys import LeaseKeys
    from celery_redislock.core.scripts import LIMIT_BLOCK

    own = FairSemaphore(redis_client, key, 1, prefix=prefix)
    assert own.acquire(blocking=False)
    parked = waiting.delay(arg)  # its key full: parked
    parking = Parking(redis_client, prefix, key)
    assert parking.status().parked == 1
    own.release()  # a plain release: nothing promoted
    assert parking.hold_for(limit, 120)
    keys = LeaseKeys(prefix, limit)
    blocker = FairSemaphore(redis_client, limit, 1, prefix=prefix)
    assert blocker.acquire(blocking=False)
    script_keys = [*keys.lease_keys(), *keys.blocked_keys()]
    assert LIMIT_BLOCK(redis_client, script_keys, [key, 1, 60_000, 0, 0, 0]) == 1
    blocker.release()  # a plain release: no wake-up
    return parked


def _apply_refused_by(redis_client: redis.Redis, prefix: str, task: Any, full_limit: str) -> None:
    """Run ``task.apply((1,))`` while ``full_limit`` (limit 1) is held by another."""
    full = FairSemaphore(redis_client, full_limit, 1, prefix=prefix)
    assert full.acquire(blocking=False)
    try:
        task.apply((1,))
    finally:
        full.release()


def test_a_give_back_wakes_the_key_waiting_for_the_limit_given_back(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    """A run takes ``a-lim``, is refused by the full ``z-lim`` and gives
    ``a-lim`` back: that give-back wakes the key noted as waiting for
    ``a-lim`` (its parked task promoted: in flight, the note gone)."""
    from celery_redislock.core.keys import LeaseKeys

    a_lim, z_lim = f"a-{uuid.uuid4().hex[:6]}", f"z-{uuid.uuid4().hex[:6]}"

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="skip",
        limits=[Limit(a_lim, 1), Limit(z_lim, 1)],
    )
    def report(account_id: int) -> None:
        raise AssertionError("refused: the body never runs")

    @app.task(
        name=unique_name(),
        shared=False,
        base=SemaphoreTask,
        semaphore_key="acct:{k}",
        semaphore_limit=1,
    )
    def waiting(k: str) -> None: ...

    parked = _park_one_noted_for(redis_client, prefix, waiting, "w", "acct:w", a_lim)
    _apply_refused_by(redis_client, prefix, report, z_lim)
    status = Parking(redis_client, prefix, "acct:w").status(count=1)
    assert (status.parked, status.in_flight) == (0, 1), status
    assert [p["task_id"] for p in status.promoted] == [parked.id]
    assert redis_client.zrange(LeaseKeys(prefix, a_lim).blocked, 0, -1) == []


def test_a_give_back_does_not_wake_the_refused_runs_own_key(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    """A run of key ``r:1`` takes ``a-lim``, is refused by the full
    ``z-lim`` and gives ``a-lim`` back; ``r:1`` itself is the key noted as
    waiting for ``a-lim``: it is passed over (its run goes back to wait, and
    its next task would only jump ahead of it), so its note and its parked
    task stay."""
    from celery_redislock.core.keys import LeaseKeys

    a_lim, z_lim = f"a-{uuid.uuid4().hex[:6]}", f"z-{uuid.uuid4().hex[:6]}"
    common: dict[str, Any] = {
        "shared": False,
        "base": SemaphoreTask,
        "semaphore_key": "r:{account_id}",
        "semaphore_limit": 1,
    }

    @app.task(
        name=unique_name(), lock_policy="skip", limits=[Limit(a_lim, 1), Limit(z_lim, 1)], **common
    )
    def report(account_id: int) -> None:
        raise AssertionError("refused: the body never runs")

    @app.task(name=unique_name(), **common)
    def waiting(account_id: int) -> None: ...

    _park_one_noted_for(redis_client, prefix, waiting, 1, "r:1", a_lim)
    _apply_refused_by(redis_client, prefix, report, z_lim)
    status = Parking(redis_client, prefix, "r:1").status()
    assert (status.parked, status.in_flight, status.waits_for) == (1, 0, a_lim), status
    assert redis_client.zrange(LeaseKeys(prefix, a_lim).blocked, 0, -1) == [b"r:1"]


def test_a_listed_name_equal_to_the_own_key_fails_the_run_without_its_body(app: Celery) -> None:
    ran: list[int] = []

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="raise",
        limits=[Limit(lambda args, kwargs: f"r:{args[0]}", 2)],
    )
    def report(account_id: int) -> None:
        ran.append(account_id)

    result = report.apply((1,))
    assert isinstance(result.result, ValueError) and "is the own key" in str(result.result)
    assert ran == []


def test_a_redis_error_midway_leaves_nothing_held(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    """The second listed limit's key holds a value of the wrong type: the
    run fails closed, and gives back its own slot and the first limit's."""

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="raise",
        limits=[Limit("a-first", 1), Limit("b-second", 1)],
    )
    def report(account_id: int) -> None: ...

    redis_client.set(f"{prefix}:{{b-second}}:holders", "not a zset")
    result = report.apply((1,))
    assert isinstance(result.result, redis.ResponseError), result.result
    for name in ("r:1", "a-first"):
        assert holders(redis_client, prefix, name) == [], name


def test_an_eager_run_waits_for_a_full_listed_limit(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    """``apply()`` under ``retry`` (which waits when eager, having no broker
    to come back through): the run waits, holding nothing, until the listed
    limit has room, then runs once."""
    ran: list[int] = []
    other = FairSemaphore(redis_client, "s", 1, prefix=prefix)

    @app.task(
        name=unique_name(),
        shared=False,
        bind=True,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="retry",
        lock_wait_timeout=60,
        limits=[Limit("s", 1)],
    )
    def report(self: Any, account_id: int) -> None:
        ran.append(account_id)

    assert other.acquire(blocking=False)
    seen_waiting = threading.Event()

    def release_when_waiting() -> None:
        # the run waits holding nothing: its own key is free meanwhile
        wait_for(lambda: redis_client.exists(f"{prefix}:{{r:1}}:fence"), 30, message="tried")
        wait_for(lambda: not holders(redis_client, prefix, "r:1"), 30, message="own given back")
        seen_waiting.set()
        other.release()

    helper = threading.Thread(target=release_when_waiting)
    helper.start()
    result = report.apply((1,))
    helper.join(30)
    assert seen_waiting.is_set()
    assert result.successful(), result.traceback
    assert ran == [1]


@pytest.mark.parametrize("timeout", [60, 1])
def test_an_eager_park_call_waits_for_a_full_listed_limit_up_to_its_timeout(
    app: Celery, redis_client: redis.Redis, prefix: str, timeout: int
) -> None:
    """``task_always_eager`` and ``.delay()`` of a ``SemaphoreTask`` (policy
    ``park``, its default): the run waits, holding nothing, until the listed
    limit has room, then runs once; with the limit still full at
    ``lock_wait_timeout`` it fails with ``LockContended`` naming the limit."""
    app.conf.task_always_eager = True
    ran: list[int] = []
    other = FairSemaphore(redis_client, "s", 1, prefix=prefix)

    @app.task(
        name=unique_name(),
        shared=False,
        base=SemaphoreTask,
        semaphore_key="r:{account_id}",
        semaphore_limit=2,
        lock_wait_timeout=timeout,
        limits=[Limit("s", 1)],
    )
    def report(account_id: int) -> None:
        ran.append(account_id)

    assert other.acquire(blocking=False)
    seen_waiting = threading.Event()

    def release_when_waiting() -> None:
        # the run waits holding nothing: its own key is free meanwhile
        wait_for(lambda: redis_client.exists(f"{prefix}:{{r:1}}:fence"), 30, message="tried")
        wait_for(lambda: not holders(redis_client, prefix, "r:1"), 30, message="own given back")
        seen_waiting.set()
        if timeout > 1:
            other.release()

    helper = threading.Thread(target=release_when_waiting)
    helper.start()
    result = report.delay(1)
    helper.join(30)
    assert seen_waiting.is_set()
    if timeout > 1:
        assert result.successful(), result.traceback
        assert ran == [1]
    else:
        assert isinstance(result.result, LockContended) and result.result.name == "s"
        assert ran == []
        assert not holders(redis_client, prefix, "r:1") and holders(redis_client, prefix, "s")


def test_a_run_time_override_of_a_listed_limit_applies(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    """``celery redislock limit set s 1`` (an ``Overrides``): a listed limit of
    5 with one holder refuses the next run, and admits it once cleared."""
    from celery_redislock import Overrides

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="raise",
        limits=[Limit("s", 5)],
    )
    def report(account_id: int) -> None: ...

    other = FairSemaphore(redis_client, "s", 5, prefix=prefix)
    assert other.acquire(blocking=False)
    overrides = Overrides(redis_client, "s", prefix)
    try:
        overrides.set(limit=1)
        refused = report.apply((1,))
        assert isinstance(refused.result, LockContended)
        assert "listed limit 's' is full" in str(refused.result)
        overrides.clear()
        assert report.apply((1,)).successful()
    finally:
        overrides.clear()
        other.release()


def test_two_listed_limits_that_name_one_semaphore_fail_the_run(app: Celery) -> None:
    ran: list[int] = []

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="raise",
        limits=[Limit("s:{region}", 2), Limit(lambda args, kwargs: f"s:{args[1]}", 3)],
    )
    def report(account_id: int, region: str) -> None:
        ran.append(account_id)

    result = report.apply((1, "eu"))
    assert isinstance(result.result, ValueError)
    assert "another listed limit names" in str(result.result)
    assert ran == []


def test_the_refusal_names_the_limit_and_refused_by_is_none_for_the_own_key(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    """``LockContended.name`` and ``lock_contended(refused_by=...)`` name the
    listed limit that refused; ``refused_by`` is None when the own key did."""
    from celery_redislock import signals

    seen: list[Any] = []

    def record(sender: Any = None, **kwargs: Any) -> None:
        seen.append(kwargs.get("refused_by"))

    signals.lock_contended.connect(record, weak=False)

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="raise",
        limits=[Limit("s", 1)],
    )
    def report(account_id: int) -> None: ...

    try:
        other = FairSemaphore(redis_client, "s", 1, prefix=prefix)
        assert other.acquire(blocking=False)
        by_limit = report.apply((1,)).result
        other.release()
        own = RedisLock(redis_client, "r:1", prefix=prefix)
        assert own.acquire(blocking=False)
        by_own_key = report.apply((1,)).result
        own.release()
    finally:
        signals.lock_contended.disconnect(record)
    assert isinstance(by_limit, LockContended) and by_limit.name == "s"
    assert isinstance(by_own_key, LockContended) and by_own_key.name == "r:1"
    assert seen == ["s", None]


def test_a_listed_limit_with_a_rate_refuses_a_start_over_it(app: Celery) -> None:
    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="raise",
        limits=[Limit("s", 5, rate="1/m")],
    )
    def report(account_id: int) -> None: ...

    assert report.apply((1,)).successful()
    refused = report.apply((2,)).result
    assert isinstance(refused, LockContended)
    assert "listed limit 's' is over its rate" in str(refused)


def test_a_listed_rate_lets_its_burst_start_back_to_back(app: Celery) -> None:
    """``Limit(..., rate="1/m", burst=2)``: two starts back to back, the
    third refused by the rate."""

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="raise",
        limits=[Limit("s", 5, rate="1/m", burst=2)],
    )
    def report(account_id: int) -> None: ...

    assert report.apply((1,)).successful() and report.apply((2,)).successful()
    refused = report.apply((3,)).result
    assert isinstance(refused, LockContended)
    assert "listed limit 's' is over its rate" in str(refused)


def test_listed_limits_are_tried_in_the_order_of_their_names(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    """Declared ``z`` then ``a``, both full: the refusal names ``a``, tried
    first (a fixed order, so two runs never take them in opposite orders)."""

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="r:{account_id}",
        lock_policy="raise",
        limits=[Limit("z", 1), Limit("a", 1)],
    )
    def report(account_id: int) -> None: ...

    taken = [FairSemaphore(redis_client, name, 1, prefix=prefix) for name in ("z", "a")]
    assert all(lease.acquire(blocking=False) for lease in taken)
    refused = report.apply((1,)).result
    assert isinstance(refused, LockContended) and refused.name == "a"
    taken[1].release()  # "a" free, "z" full: now "z" refuses, and "a" is given back
    refused = report.apply((1,)).result
    assert isinstance(refused, LockContended) and refused.name == "z"
    assert not holders(redis_client, prefix, "a")
    taken[0].release()


def test_wait_gives_up_at_once_on_a_listed_rate_that_admits_it_only_after_the_timeout(
    app: Celery,
) -> None:
    """``wait`` (eager) refused by a listed limit's rate that admits the run
    only in a minute, with a wait timeout of 30 s: it does not sleep for
    nothing, and its error says the rate's wait is past the timeout (not
    that it waited 30 s)."""

    @app.task(
        name=unique_name(),
        shared=False,
        base=LockedTask,
        lock_key="w:{account_id}",
        lock_policy="wait",
        lock_wait_timeout=30,
        limits=[Limit(f"s-{uuid.uuid4().hex[:6]}", 5, rate="1/m")],
    )
    def report(account_id: int) -> None: ...

    assert report.apply((1,)).successful()
    refused = report.apply((2,)).result
    assert isinstance(refused, LockContended)
    assert "is over its rate (admitted in" in str(refused)
    assert "past the wait timeout of 30 s (policy wait)" in str(refused)


def test_rate_limited_task_takes_limits_with_park_and_every_policy_takes_them(
    app: Celery,
) -> None:
    from celery_redislock import RateLimitedTask

    @app.task(
        name=unique_name(),
        shared=False,
        base=RateLimitedTask,
        rate_key="api:{account_id}",
        rate="10/s",
        limits=[Limit("s", 2)],
    )
    def call(account_id: int) -> None: ...

    assert call.lock_policy == "park"
    per_call = call.apply_async((1,), lock_policy="keep_latest")  # refused before
    assert per_call.id  # published or parked, not a TypeError
    for policy in ("park", "keep_latest", "skip", "raise", "retry", "wait"):

        @app.task(
            name=unique_name(),
            shared=False,
            base=SemaphoreTask,
            semaphore_key="k:{account_id}",
            semaphore_limit=1,
            lock_policy=policy,
            limits=[Limit("s", 2)],
        )
        def refresh(account_id: int) -> None: ...

        assert [listed.spec.key for listed in type(refresh)._redislock_listed] == ["s"], policy


def test_a_plain_call_has_no_listed_leases(app: Celery) -> None:
    @app.task(
        name=unique_name(),
        shared=False,
        bind=True,
        base=LockedTask,
        lock_key="r:{account_id}",
        limits=[Limit("s", 1)],
    )
    def report(self: Any, account_id: int) -> Any:
        return self.request.redislock, self.request.redislock_listed

    assert report(1) == (None, [])


# -- real workers -----------------------------------------------------------------


def worker_config(redis_url: str, listed_retry: str | None = None) -> dict[str, str]:
    """A worker config of its own prefix; ``listed_retry``: how long a head
    sent back by a full listed limit waits when nothing wakes it."""
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
        "park_sweep": "0.5",
    }
    if listed_retry is not None:
        config["listed_retry"] = listed_retry
    return config


@pytest.fixture
def config(redis_url: str) -> dict[str, str]:
    return worker_config(redis_url)


@pytest.fixture
def worker_app(config: dict[str, str]) -> Celery:
    return create_listed_app(config)


@pytest.fixture
def start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with worker_factory(tmp_path_factory.mktemp("listed")) as start:
        yield start


def events(app: Celery, task: str = "charge") -> list[dict[str, Any]]:
    """The start and end events of ``listed.<task>``'s bodies."""
    return app.recorder.events(task, "all")  # type: ignore[attr-defined,no-any-return]


def most_at_once(history: list[dict[str, Any]], account: str | None = None) -> int:
    """The most runs (of ``account``, or of all) that were between start and end at once."""
    edges = sorted(
        (e["t"], 1 if e["what"] == "start" else -1)
        for e in history
        if account is None or e["account"] == account
    )
    running = most = 0
    for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):  # ends first on a tie
        running += step
        most = max(most, running)
    return most


def open_gate(client: redis.Redis, prefix: str, account: str, n: int) -> None:
    client.set(f"{prefix}:gate:{account}:{n}", 1)


def test_per_account_and_shared_caps_on_two_prefork_workers(
    worker_app: Celery, start: Any, config: dict[str, str], redis_client: redis.Redis
) -> None:
    prefix = config["prefix"]
    task = worker_app.tasks["listed.charge"]
    start(config, module="tests.celery_apps.listed", pool="prefork", concurrency=4)
    start(config, module="tests.celery_apps.listed", pool="prefork", concurrency=4)

    # Four gated runs that their accounts' caps (2 each) admit: the shared cap
    # (3) holds the fourth back, and says so.
    gated = [("heavy", 0), ("heavy", 1), ("light", 0), ("light", 1)]
    results = {call: task.delay(*call, gate=True) for call in gated}
    wait_for(
        lambda: sum(e["what"] == "start" for e in events(worker_app)) == 3, 60, message="3 runs"
    )
    assert len(holders(redis_client, prefix, SHARED)) == 3
    started = {(e["account"], e["n"]) for e in events(worker_app) if e["what"] == "start"}
    (waiting,) = set(gated) - started

    def refused_by_shared() -> bool:
        return any(
            s["signal"] == "redislock_contended"
            and s.get("refused_by") == SHARED
            and s.get("task_id") == results[waiting].id
            for s in worker_app.recorder.signals()  # type: ignore[attr-defined]
        )

    wait_for(refused_by_shared, 30, message="the waiting run refused by the shared limit")
    for call in gated:
        open_gate(redis_client, prefix, *call)
    for result in results.values():
        assert result.get(timeout=60) in (0, 1)

    # A skewed backlog: one heavy account, two light ones.
    calls = [("heavy", n) for n in range(2, 14)] + [(a, n) for a in ("l1", "l2") for n in range(3)]
    for result in [task.delay(*call, duration=0.2) for call in calls]:
        result.get(timeout=120)

    # The shared limit lowered at run time: one at a time from then on.
    redis_client.set(f"{prefix}:shared-limit", 1)
    lowered = [task.delay(account, 100, duration=0.2) for account in ("x", "y", "z")]
    for result in lowered:
        result.get(timeout=120)

    history = events(worker_app)
    assert sum(e["what"] == "end" for e in history) == len(gated) + len(calls) + 3
    assert all(e["listed"] == [SHARED] for e in history if e["what"] == "start")
    assert most_at_once(history) == 3  # the shared cap: used, never over
    for account in ("heavy", "light", "l1", "l2"):
        assert most_at_once(history, account) <= 2, account
    assert most_at_once([e for e in history if e["n"] == 100]) == 1
    assert holders(redis_client, prefix, SHARED) == []


def test_a_child_killed_while_holding_gives_back_its_listed_slot(
    worker_app: Celery, start: Any, config: dict[str, str], redis_client: redis.Redis
) -> None:
    prefix = config["prefix"]
    start(config, module="tests.celery_apps.listed", pool="prefork", concurrency=2)
    result = worker_app.tasks["listed.charge"].delay("a", 0, gate=True)
    (first,) = wait_for(lambda: events(worker_app), 60, message="the run started")
    assert len(holders(redis_client, prefix, SHARED)) == 1
    os.kill(first["pid"], signal.SIGKILL)
    wait_nothing_held(redis_client, prefix, SHARED, "acct:a", timeout=15)  # the ttl is 30 s
    with pytest.raises(Exception, match=r"(?i)worker"):
        result.get(timeout=60)
    released = [
        s
        for s in worker_app.recorder.signals()  # type: ignore[attr-defined]
        if s["signal"] == "redislock_released" and s.get("task_id") == result.id
    ]
    assert {(s["name"], s["reason"]) for s in released} == {
        ("acct:a", "worker lost"),
        (SHARED, "worker lost"),
    }


def test_a_whole_worker_killed_while_holding_gives_back_its_listed_slot_before_the_ttl(
    worker_app: Celery, start: Any, config: dict[str, str], redis_client: redis.Redis
) -> None:
    from tests.celery.test_park import stated_names

    prefix = config["prefix"]
    first = start(config, module="tests.celery_apps.listed", pool="prefork", concurrency=2)
    worker_app.tasks["listed.charge"].delay("a", 0, gate=True)
    wait_for(lambda: events(worker_app), 60, message="the run started")
    wait_for(
        lambda: SHARED in stated_names(worker_app) and "acct:a" in stated_names(worker_app),
        30,
        message="both leases stated",
    )
    (holder,) = holders(redis_client, prefix, SHARED)
    seconds, micros = redis_client.time()
    expires_at = seconds + micros / 1e6 + holder.expires_in
    first.kill()  # main process and children: nobody left to release
    start(config, module="tests.celery_apps.listed", pool="prefork", concurrency=2)
    wait_nothing_held(redis_client, prefix, SHARED, "acct:a", timeout=60)
    seconds, micros = redis_client.time()
    assert seconds + micros / 1e6 < expires_at, "given back before the lease's ttl"


@pytest.mark.parametrize("ending", ["raise", "retry", "time limit", "revoke"])
def test_listed_leases_are_given_back_however_the_run_ends(
    worker_app: Celery,
    start: Any,
    config: dict[str, str],
    redis_client: redis.Redis,
    ending: str,
) -> None:
    """A run ends by raising, by ``self.retry``, by its hard time limit or by
    ``revoke(terminate=True)``: its slot of the listed limit (1 here) is
    given back at once (its ttl is 30 s), with ``lock_released`` naming it,
    and the next run of another account takes it."""
    prefix = config["prefix"]
    task = worker_app.tasks["listed.charge"]
    redis_client.set(f"{prefix}:shared-limit", 1)
    start(config, module="tests.celery_apps.listed", pool="prefork", concurrency=2)
    if ending in ("raise", "retry"):
        result = task.apply_async(("a", 0), {"end": ending})
    else:
        result = task.apply_async(("a", 0), {"gate": True}, time_limit=3)
        wait_for(lambda: events(worker_app), 60, message="the run started")
        if ending == "revoke":
            result.revoke(terminate=True)
    if ending == "raise":
        with pytest.raises(RuntimeError):
            result.get(timeout=60)
    elif ending == "retry":
        assert result.get(timeout=60) == 0
    else:
        with pytest.raises(Exception):  # noqa: B017  TimeLimitExceeded or TaskRevokedError
            result.get(timeout=60)
    following = task.delay("b", 0, duration=0.1)
    assert following.get(timeout=20) == 0  # well inside the 30 s ttl
    wait_nothing_held(redis_client, prefix, SHARED, "acct:a", timeout=20)
    released = [
        s
        for s in worker_app.recorder.signals()  # type: ignore[attr-defined]
        if s["signal"] == "redislock_released"
        and s.get("task_id") == result.id
        and s.get("name") == SHARED
    ]
    assert released, "lock_released for the listed limit"
    order = [
        s.get("name")
        for s in worker_app.recorder.signals()  # type: ignore[attr-defined]
        if s["signal"] == "redislock_released" and s.get("task_id") == result.id
    ]
    assert order[:2] == [SHARED, "acct:a"]  # listed ones first
    if ending == "retry":
        assert [s["reason"] for s in released][:1] == ["retry"]
    starts = [e["account"] for e in events(worker_app) if e["what"] == "start"]
    assert starts == (["a", "a", "b"] if ending == "retry" else ["a", "b"])


@pytest.mark.parametrize("body", ["sleeps", "holds the GIL"])
def test_a_listed_lease_is_renewed_while_the_body_outlives_its_ttl(
    start: Any, redis_url: str, redis_client: redis.Redis, body: str
) -> None:
    """ttl 2 s and a body that runs past three ttls: the run keeps its slot of
    the listed limit (1 here) the whole time, so a second account's run
    does not start before the first ends; also when the body holds the GIL
    in one C call, so that only the worker's main process renews."""
    config = {**worker_config(redis_url), "ttl": "2"}
    prefix = config["prefix"]
    app = create_listed_app(config)
    task = app.tasks["listed.charge"]
    redis_client.set(f"{prefix}:shared-limit", 1)
    start(config, module="tests.celery_apps.listed", pool="prefork", concurrency=2)
    if body == "sleeps":
        first = task.delay("a", 0, gate=True)
    else:
        first = task.delay("a", 0, hog=16.0, duration=0)  # well past the 7 s looked at
    wait_for(lambda: events(app), 60, message="the run started")
    (holder,) = holders(redis_client, prefix, SHARED)
    second = task.delay("b", 0, duration=0.1)
    began = redis_client.time()[0]

    def three_ttls_later() -> bool:
        now = holders(redis_client, prefix, SHARED)
        assert [h.owner for h in now] == [holder.owner], "the slot changed hands"
        assert [e["account"] for e in events(app) if e["what"] == "start"] == ["a"]
        return bool(redis_client.time()[0] >= began + 7)

    wait_for(three_ttls_later, 30, interval=0.2, message="three ttls with the slot held")
    open_gate(redis_client, prefix, "a", 0)
    assert first.get(timeout=60) == 0
    assert second.get(timeout=60) == 0
    assert most_at_once(events(app)) == 1
    lost = [s for s in app.recorder.signals() if s["signal"] == "redislock_lost"]  # type: ignore[attr-defined]
    assert lost == []


# -- wait: waiting in the worker process for the whole set --------------------------


def test_wait_blocks_for_the_whole_set_holding_nothing_and_times_out_naming_the_limit(
    worker_app: Celery, start: Any, config: dict[str, str], redis_client: redis.Redis
) -> None:
    """``wait`` with a full listed limit (1): the run waits in its worker
    process, taking its own slot and the limit again a little later, and
    starts when the holder ends; one whose ``lock_wait_timeout`` passes
    first fails with ``LockContended`` naming the listed limit.  While they
    wait, the account's own key is free for another task of it."""
    prefix = config["prefix"]
    task = worker_app.tasks["listed.charge_wait"]
    redis_client.set(f"{prefix}:shared-limit", 1)
    start(config, module="tests.celery_apps.listed", pool="prefork", concurrency=4)
    holder = task.delay("a", 0, gate=True)
    wait_for(lambda: events(worker_app, "charge_wait"), 60, message="a0 started")
    waiting = task.apply_async(("b", 0), {"duration": 0.1}, lock_wait_timeout=60)
    late = task.apply_async(("c", 0), {"duration": 0.1}, lock_wait_timeout=1)
    with pytest.raises(LockContended, match=r"listed limit 'shared' is full after waiting"):
        late.get(timeout=60)
    own = FairSemaphore(redis_client, "acct:b", 2, prefix=prefix)
    taken = wait_for(lambda: own.acquire(blocking=False), 10, interval=0.01, message="b's key")
    assert taken  # b's own key is not held while it waits for the shared limit
    own.release()
    open_gate(redis_client, prefix, "a", 0)
    assert holder.get(timeout=60) == 0
    assert waiting.get(timeout=60) == 0
    starts = [e["account"] for e in events(worker_app, "charge_wait") if e["what"] == "start"]
    assert starts == ["a", "b"]
    assert most_at_once(events(worker_app, "charge_wait")) == 1
    assert holders(redis_client, prefix, SHARED) == []


# -- park: waiting in Redis for a listed limit --------------------------------------


def parked_waiting_for(app: Celery, task_id: str, limit: str = SHARED) -> bool:
    return any(
        s["signal"] == "redislock_parked"
        and s.get("task_id") == task_id
        and s.get("where") == "limit"
        and s.get("waits_for") == limit
        for s in app.recorder.signals()  # type: ignore[attr-defined]
    )


def sent_back_by_a_limit(app: Celery, task_id: str) -> int:
    """How often ``task_id`` went back to its park for a listed limit."""
    return sum(
        s["signal"] == "redislock_parked"
        and s.get("task_id") == task_id
        and s.get("where") == "limit"
        for s in app.recorder.signals()  # type: ignore[attr-defined]
    )


def blocked(client: redis.Redis, prefix: str, limit: str = SHARED) -> list[str]:
    return [m.decode() for m in client.zrange(f"{prefix}:{{{limit}}}:blocked", 0, -1)]


class Scene:
    """One park test's world: a config of its own prefix (``listed_retry``:
    how long a held key waits when nothing wakes it; 120 s tells a wake-up
    from that fallback), the listed app and one of its tasks, the shared
    limit (``shared``: None, 3), and the reads and waits the tests share.
    Workers are started with :meth:`worker`; ``lock_redis``: another Redis
    (a Cluster) for the locks, ``client`` its client."""

    def __init__(
        self,
        start: Any,
        redis_url: str,
        client: redis.Redis,
        task: str = "charge_park",
        listed_retry: str = "120",
        shared: int | None = None,
        lock_redis: str | None = None,
    ) -> None:
        self._start = start
        self.config = worker_config(redis_url, listed_retry=listed_retry)
        if lock_redis is not None:  # a Redis Cluster for the locks (``client`` its client)
            self.config["lock_redis"] = lock_redis
        self.prefix = self.config["prefix"]
        self.client = client
        self.app = create_listed_app(self.config)
        self.name = task
        self.task = self.app.tasks[f"listed.{task}"]
        # The test's own keys (the shared limit's size, the gates) live
        # beside the recorder's, on ``redis_url``.
        self.own_keys = self.app.recorder.client  # type: ignore[attr-defined]
        if shared is not None:
            self.own_keys.set(f"{self.prefix}:shared-limit", shared)

    def worker(self, concurrency: int = 4) -> Any:
        return self._start(
            self.config, module="tests.celery_apps.listed", pool="prefork", concurrency=concurrency
        )

    def call(self, account: str, n: int, **kwargs: Any) -> Any:
        return self.task.apply_async((account, n), kwargs)

    def events(self) -> list[dict[str, Any]]:
        return events(self.app, self.name)

    def starts(self) -> list[tuple[str, int]]:
        return [(e["account"], e["n"]) for e in self.events() if e["what"] == "start"]

    def wait_started(self, *calls: tuple[str, int]) -> list[dict[str, Any]]:
        """Wait until each of ``calls`` started; their start events."""
        found: list[dict[str, Any]] = wait_for(
            lambda: (
                [
                    e
                    for e in self.events()
                    if e["what"] == "start" and (e["account"], e["n"]) in calls
                ]
                if set(calls) <= set(self.starts())
                else []
            ),
            60,
            message=f"{calls} started",
        )
        return found

    def wait_noted(self, *accounts: str, limit: str = SHARED) -> None:
        names = [f"acct:{a}" for a in accounts]
        wait_for(
            lambda: blocked(self.client, self.prefix, limit) == names,
            60,
            message=f"{names} noted",
        )

    def wait_parked(self, account: str, count: int) -> None:
        wait_for(
            lambda: self.status(account).parked == count,
            60,
            message=f"{count} parked of {account}",
        )

    def status(self, account: str) -> Any:
        return Parking(self.client, self.prefix, f"acct:{account}").status(count=1)

    def holder_and_waiter(self, holder: str, waiter: str, **options: Any) -> tuple[Any, Any]:
        """Start a worker; a gated run of ``holder`` (n 0) holds the shared
        limit, and a call of ``waiter`` (n 0; gated, or with ``options`` as
        its keyword arguments) is noted waiting for it."""
        self.worker()
        held = self.call(holder, 0, gate=True)
        self.wait_started((holder, 0))
        waiting = self.call(waiter, 0, **(options or {"gate": True}))
        self.wait_noted(waiter)
        return held, waiting

    def open(self, account: str, n: int = 0) -> None:
        open_gate(self.own_keys, self.prefix, account, n)

    def holders(self, name: str) -> list[Any]:
        return holders(self.client, self.prefix, name)

    def wait_killed(self, point: str) -> None:
        wait_for(
            lambda: not self.own_keys.exists(f"{self.prefix}:fault:{point}"),
            60,
            message=f"the kill at {point}",
        )

    def only_the_newer_runs(self, held: Any, newer: Any, n: int) -> None:
        """``held`` (a0, gated) ends, then ``newer`` (b<n>) runs, alone: the
        shared limit never had two, and b's slots are given back."""
        self.open("a")
        assert held.get(timeout=60) == 0
        assert newer.get(timeout=60) == n
        assert self.starts() == [("a", 0), ("b", n)]
        assert most_at_once(self.events()) == 1
        self.wait_nothing_held("acct:b", SHARED)

    def wait_nothing_held(self, *names: str) -> None:
        wait_nothing_held(self.client, self.prefix, *names)


def test_a_skipped_run_names_the_listed_limit_in_its_state_and_event(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """Under ``skip`` on a prefork worker, a run the full shared limit
    refuses ends ``SKIPPED`` with ``refused_by`` in its meta (the own key
    had room), holding nothing."""
    scene = Scene(start, redis_url, redis_client, shared=1, task="charge_skip")
    scene.worker(concurrency=2)
    holder = scene.call("a", 0, gate=True)
    scene.wait_started(("a", 0))
    refused = scene.call("b", 0)
    wait_for(lambda: refused.state == "SKIPPED", 60, message="b's run skipped")
    assert refused.info["refused_by"] == SHARED
    assert not scene.holders("acct:b")
    scene.open("a", 0)
    assert holder.get(timeout=60) == 0
    assert scene.starts() == [("a", 0)]


def test_park_waits_in_redis_for_a_full_shared_limit_and_is_woken_by_its_release(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """Per-account cap 2 and shared cap 3 under ``park``, on two prefork
    workers: the run the shared cap refuses goes back to its park (PARKED,
    naming the limit), holding nothing, and the release of a shared slot
    wakes it (the fallback retry is 120 s here: only a wake-up can start it
    in time); then a skewed backlog never exceeds either cap, and light
    accounts run beside the heavy one."""
    scene = Scene(start, redis_url, redis_client)
    app = scene.app
    workers = [scene.worker(), scene.worker()]

    gated = [("heavy", 0), ("heavy", 1), ("light", 0), ("light", 1)]
    results = {}
    for call in gated:  # one after the other: the fourth is the one refused
        results[call] = scene.call(*call, gate=True)
        if len(results) < len(gated):
            scene.wait_started(*results)
    waiting = results[("light", 1)]
    wait_for(lambda: parked_waiting_for(app, waiting.id), 60, message="parked, waiting")
    assert waiting.state == "PARKED"
    assert waiting.info["waits_for"] == SHARED
    scene.wait_noted("light")  # once its own slot is given back, after the PARKED
    # Its own slot, taken before the listed limit refused it, is given back
    # with reason "limit"; no lock_acquired came before that (it never ran).
    mine = [
        (s["signal"], s.get("name"), s.get("reason"))
        for s in app.recorder.signals()  # type: ignore[attr-defined]
        if s.get("task_id") == waiting.id
    ]
    back = mine.index(("redislock_released", "acct:light", "limit"))
    assert not any(signal == "redislock_acquired" for signal, _, _ in mine[:back])
    line = f"[{waiting.id}] parked (limit): listed limit 'shared' is full; back at the head of"
    assert any(line in worker.log_tail(2000) for worker in workers)
    status = scene.status("light")
    assert status.waits_for == SHARED and status.parked == 1
    assert "waits for listed limit 'shared'" in format_parked([status])[0]
    assert "acct:light  [parked]" in cli(app, "status")
    assert "waits for listed limit 'shared'" in cli(app, "status")
    [row] = [r for r in json.loads(cli(app, "status", "--json"))["parked"] if r["parked"]]
    assert (row["name"], row["waits_for"]) == ("acct:light", SHARED)
    assert len(scene.holders(SHARED)) == 3
    assert len(scene.holders("acct:light")) == 1  # its own slot given back
    scene.open("heavy", 0)
    scene.wait_started(("light", 1))  # woken by the release
    assert blocked(redis_client, scene.prefix) == []
    for call in gated:
        scene.open(*call)
    for result in results.values():
        assert result.get(timeout=60) in (0, 1)

    calls = [("heavy", n) for n in range(2, 14)] + [(a, n) for a in ("l1", "l2") for n in range(3)]
    for result in [scene.call(*call, duration=0.2) for call in calls]:
        result.get(timeout=180)
    history = scene.events()
    starts = [e for e in history if e["what"] == "start"]
    assert len(starts) == len(gated) + len(calls)  # each ran once
    assert len({(e["account"], e["n"]) for e in starts}) == len(starts)
    assert most_at_once(history) <= 3
    for account in ("heavy", "light", "l1", "l2"):
        assert most_at_once(history, account) <= 2, account
    last_heavy = max(e["t"] for e in starts if e["account"] == "heavy")
    for light in ("l1", "l2"):
        assert min(e["t"] for e in starts if e["account"] == light) < last_heavy, light
    assert scene.holders(SHARED) == []


@pytest.mark.parametrize("point", ["listed_parked", "listed_released", "listed_noted"])
def test_a_child_killed_while_its_run_goes_back_to_wait_for_a_limit(
    start: Any, redis_url: str, redis_client: redis.Redis, point: str
) -> None:
    """The child dies at each step of going back to the park for a full
    listed limit: the task is neither lost nor run twice, and the limit is
    never exceeded (it runs once the hold ends, 2 s here, or a release
    wakes it)."""
    scene = Scene(start, redis_url, redis_client, listed_retry="2", shared=1)
    scene.worker(concurrency=2)
    holder = scene.call("a", 0, gate=True)
    scene.wait_started(("a", 0))
    fault = f"{scene.prefix}:fault:{point}"
    redis_client.set(fault, 1)
    waiting = scene.call("b", 0, duration=0.1)
    wait_for(lambda: not redis_client.exists(fault), 60, message="the kill")
    scene.open("a")
    assert holder.get(timeout=60) == 0
    assert waiting.get(timeout=60) == 0
    assert scene.starts() == [("a", 0), ("b", 0)]
    assert most_at_once(scene.events()) == 1
    scene.wait_nothing_held("acct:b", SHARED)


def superseded(app: Celery, task_id: str, by: str) -> bool:
    """Whether ``task_id`` was dropped as superseded by ``by`` (its signal)."""
    return any(
        s["signal"] == "redislock_dropped"
        and s.get("task_id") == task_id
        and s.get("reason") == "superseded"
        and s.get("superseded_by") == by
        for s in app.recorder.signals()  # type: ignore[attr-defined]
    )


def test_keep_latest_keeps_the_newest_call_waiting_for_a_full_shared_limit(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """``keep_latest`` with a listed limit, on a prefork worker: the run the
    full shared limit refuses goes back to its key's park as the key's
    pending call (PARKED, waiting for the limit), each newer call of the key
    takes the place of the one before it (``SUPERSEDED``, naming the newer
    call), and the release of the shared slot starts the newest one, once;
    neither limit is exceeded."""
    scene = Scene(start, redis_url, redis_client, task="charge_latest", shared=1)
    held, first = scene.holder_and_waiter("a", "b", duration=0.1)
    wait_for(lambda: first.state == "PARKED", 60, message="b0 parked for the limit")
    assert first.info["waits_for"] == SHARED
    second = scene.call("b", 1, duration=0.1)
    wait_for(lambda: first.state == "SUPERSEDED", 60, message="b0 replaced by b1")
    third = scene.call("b", 2, duration=0.1)
    wait_for(lambda: second.state == "SUPERSEDED", 60, message="b1 replaced by b2")
    assert first.info["superseded_by"] == second.id
    assert second.info["superseded_by"] == third.id
    assert superseded(scene.app, first.id, second.id)
    status = scene.status("b")
    assert (status.parked, status.waits_for) == (1, SHARED)
    scene.only_the_newer_runs(held, third, 2)
    assert (first.state, second.state) == ("SUPERSEDED", "SUPERSEDED")


@pytest.mark.parametrize(
    ("point", "countdown"),
    [("", 0), ("listed_parked", 0), ("listed_released", 0), ("listed_parked", 0.5)],
)
def test_a_refused_keep_latest_run_gives_way_to_a_newer_call_parked_meanwhile(
    start: Any, redis_url: str, redis_client: redis.Redis, point: str, countdown: float
) -> None:
    """A ``keep_latest`` run the full shared limit refuses while a newer
    call of its key waits in the park (it parked while the run held the
    key) is not parked again: it ends ``SUPERSEDED`` by that call (where
    ``"limit"``), which waits for the limit and runs once it frees.  With
    the child killed just after (``point``), before or after its own slot
    is given back, the state stays ``SUPERSEDED`` (no FAILURE) and the
    newer call still runs, once.  With a ``countdown`` the run arrives
    without a promotion token (decided at arrival, not at enqueue)."""
    scene = Scene(start, redis_url, redis_client, task="charge_latest", shared=1, listed_retry="2")
    scene.worker(concurrency=2)
    held = scene.call("a", 0, gate=True)
    scene.wait_started(("a", 0))
    pause = f"{scene.prefix}:pause:listed_back"
    scene.own_keys.set(pause, 1)
    if point:
        scene.own_keys.set(f"{scene.prefix}:fault:{point}", 1)
    first = scene.task.apply_async(("b", 0), {"duration": 0.1}, countdown=countdown or None)
    wait_for(
        lambda: scene.own_keys.exists(f"{scene.prefix}:paused:listed_back"),
        60,
        message="b0 refused by the limit, holding its own slot",
    )
    second = scene.call("b", 1, duration=0.1)  # b's own slot is b0's: it parks
    wait_for(lambda: second.state == "PARKED", 60, message="b1 parked")
    scene.own_keys.delete(pause)
    wait_for(lambda: first.state == "SUPERSEDED", 60, message="b0 gave way to b1")
    assert (first.info["superseded_by"], first.info["where"]) == (second.id, "limit")
    if point:
        scene.wait_killed(point)
    scene.only_the_newer_runs(held, second, 1)
    assert first.state == "SUPERSEDED"


def paused(scene: Scene, point: str) -> None:
    wait_for(
        lambda: scene.own_keys.exists(f"{scene.prefix}:paused:{point}"),
        60,
        message=f"a run paused at {point}",
    )


@pytest.mark.parametrize("older_back_first", [True, False])
def test_two_refused_keep_latest_runs_of_one_key_keep_the_newer(
    start: Any, redis_url: str, redis_client: redis.Redis, older_back_first: bool
) -> None:
    """Two ``keep_latest`` runs of one key (two slots) refused by the full
    shared limit go back to the park in either order: the one admitted
    first (the older call) ends ``SUPERSEDED`` by the newer, which runs
    once the limit frees; never the older call's arguments."""
    scene = Scene(start, redis_url, redis_client, task="charge_latest2", shared=1)
    scene.worker()
    held = scene.call("a", 0, gate=True)
    scene.wait_started(("a", 0))
    ids = [f"b{n}-{uuid.uuid4().hex[:8]}" for n in range(2)]
    for task_id in ids:
        scene.own_keys.set(f"{scene.prefix}:pause:listed_back:{task_id}", 1)
    older = scene.task.apply_async(("b", 0), {"duration": 0.1}, task_id=ids[0])
    paused(scene, f"listed_back:{ids[0]}")  # holds a slot of b: admitted first
    newer = scene.task.apply_async(("b", 1), {"duration": 0.1}, task_id=ids[1])
    paused(scene, f"listed_back:{ids[1]}")
    first, second = (older, newer) if older_back_first else (newer, older)
    scene.own_keys.delete(f"{scene.prefix}:pause:listed_back:{first.id}")
    wait_for(lambda: first.state == "PARKED", 60, message="the first back parked")
    scene.own_keys.delete(f"{scene.prefix}:pause:listed_back:{second.id}")
    wait_for(lambda: older.state == "SUPERSEDED", 60, message="the older call superseded")
    assert (older.info["superseded_by"], older.info["where"]) == (newer.id, "limit")
    scene.only_the_newer_runs(held, newer, 1)
    assert older.state == "SUPERSEDED"


def test_a_replaced_keep_latest_run_without_a_token_killed_after_stays_superseded(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """A ``keep_latest`` run that came without a promotion token (a
    countdown: decided at arrival), back in its park for the full shared
    limit, is replaced there by a newer call (``SUPERSEDED``); its child
    killed after that leaves the state ``SUPERSEDED`` (no FAILURE), and the
    newer call runs once."""
    scene = Scene(start, redis_url, redis_client, task="charge_latest", shared=1, listed_retry="2")
    scene.worker(concurrency=2)
    held = scene.call("a", 0, gate=True)
    scene.wait_started(("a", 0))
    scene.own_keys.set(f"{scene.prefix}:pause:listed_parked", 1)
    scene.own_keys.set(f"{scene.prefix}:fault:listed_parked", 1)
    first = scene.task.apply_async(("b", 0), {"duration": 0.1}, countdown=0.5)
    paused(scene, "listed_parked")  # back in the park, its own slot still held
    wait_for(lambda: first.state == "PARKED", 60, message="b0 parked for the limit")
    second = scene.call("b", 1, duration=0.1)
    wait_for(lambda: first.state == "SUPERSEDED", 60, message="b0 replaced by b1")
    scene.own_keys.delete(f"{scene.prefix}:pause:listed_parked")
    scene.wait_killed("listed_parked")
    scene.only_the_newer_runs(held, second, 1)
    assert first.state == "SUPERSEDED"
    assert first.info["superseded_by"] == second.id


def test_a_park_run_without_a_token_killed_after_its_task_ran_elsewhere_stores_no_failure(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """A ``park`` run that came without a promotion token (a countdown),
    sent back to its park by the full shared limit, is promoted and runs in
    another process while the first one still unwinds; that first process
    killed then stores no FAILURE for the task (the worker says it went
    back to its park), which ends ``SUCCESS``, run once.  (It is promoted
    when its hold ends, 2 s: its key is not noted for the limit yet.)"""
    scene = Scene(start, redis_url, redis_client, shared=1, listed_retry="2")
    worker = scene.worker()
    held = scene.call("a", 0, gate=True)
    scene.wait_started(("a", 0))
    scene.own_keys.set(f"{scene.prefix}:pause:listed_parked", 1)
    scene.own_keys.set(f"{scene.prefix}:fault:listed_parked", 1)
    waiting = scene.task.apply_async(("b", 0), {"gate": True}, countdown=0.5)
    paused(scene, "listed_parked")  # back in the park, its own slot still held
    scene.open("a")  # the shared slot frees: b0 is promoted, and run elsewhere
    scene.wait_started(("b", 0))
    scene.own_keys.delete(f"{scene.prefix}:pause:listed_parked")
    scene.wait_killed("listed_parked")
    line = f"[{waiting.id}]: its process died after the task was parked"
    wait_for(lambda: line in worker.log_tail(4000), 60, message="the lost process ignored")
    assert waiting.state != "FAILURE"
    scene.open("b")
    assert held.get(timeout=60) == 0
    assert waiting.get(timeout=60) == 0
    assert scene.starts() == [("a", 0), ("b", 0)]
    scene.wait_nothing_held("acct:b", SHARED)


def test_a_head_waits_for_a_slot_its_own_limit_admits(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """Two runs hold the shared limit at 3; the limit is lowered to 2 for new
    calls: the next call's head waits (noted once, not woken while the
    holders are as many as its own limit allows, so no promote-and-refuse
    loop), and runs once one holder ends."""
    scene = Scene(start, redis_url, redis_client)
    scene.worker()
    holding = [scene.call(account, 0, gate=True) for account in ("a", "b")]
    scene.wait_started(("a", 0), ("b", 0))
    redis_client.set(f"{scene.prefix}:shared-limit", 2)
    waiting = scene.call("c", 0, duration=0.1)
    wait_for(lambda: parked_waiting_for(scene.app, waiting.id), 60, message="c parked, waiting")
    scene.wait_noted("c")
    scene.open("a")
    assert waiting.get(timeout=60) == 0
    parked = [
        s
        for s in scene.app.recorder.signals()  # type: ignore[attr-defined]
        if s["signal"] == "redislock_parked" and s.get("task_id") == waiting.id
    ]
    assert len(parked) == 1, parked  # sent back once, woken once
    scene.open("b")
    for result in holding:
        assert result.get(timeout=60) == 0
    assert most_at_once(scene.events()) <= 2 + 1  # 2 old holders, then c beside b


def test_a_whole_worker_killed_while_holding_wakes_the_key_waiting_for_its_limit(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """The worker whose run holds the shared limit is killed whole; another
    worker on the machine gives the dead run's slots back (the dead-holder
    path), and that release wakes the key whose head waits for the limit
    (its fallback retry is 120 s here, its lease ttl 30 s)."""
    from tests.celery.test_park import stated_names

    scene = Scene(start, redis_url, redis_client, shared=1)
    doomed = scene.worker(concurrency=2)
    scene.call("a", 0, gate=True)
    scene.wait_started(("a", 0))
    wait_for(lambda: SHARED in stated_names(scene.app), 30, message="its lease stated")
    waiting = scene.call("b", 0, duration=0.1)
    scene.wait_noted("b")
    doomed.kill()
    scene.worker(concurrency=2)
    assert waiting.get(timeout=25) == 0  # well before the 30 s ttl and the 120 s fallback
    assert scene.starts() == [("a", 0), ("b", 0)]


def test_a_whole_worker_killed_holding_two_slots_in_one_process_wakes_a_key_for_each(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """The killed worker (a thread pool: one process) holds both slots of
    the shared limit (2); keys b and d wait.  The dead-holder path gives
    back each slot and wakes a key for each: d runs while b's run still
    holds its slot (b's release cannot be what woke it; the fallback retry
    is 120 s, the ttl 30 s)."""
    from tests.celery.test_park import stated_holdings

    scene = Scene(start, redis_url, redis_client, shared=2)
    doomed = start(scene.config, module="tests.celery_apps.listed", pool="threads", concurrency=3)
    scene.call("a", 0, gate=True)
    scene.call("c", 0, gate=True)
    scene.wait_started(("a", 0))
    scene.wait_started(("c", 0))
    wait_for(lambda: len(scene.holders(SHARED)) == 2, 30, message="both slots held")

    def both_stated() -> bool:  # a statement lags a change by up to 0.5 s
        return sum(len(h.get(SHARED, [])) for h in stated_holdings(scene.app)) == 2

    wait_for(both_stated, 30, message="both leases stated")
    b0 = scene.call("b", 0, gate=True)
    scene.wait_noted("b")
    d0 = scene.call("d", 0, duration=0.1)
    scene.wait_noted("b", "d")
    doomed.kill()
    scene.worker(concurrency=3)
    assert d0.get(timeout=25) == 0  # before the ttl and the fallback, b still running
    assert ("b", 0) in scene.starts()
    scene.open("b")
    assert b0.get(timeout=30) == 0


def test_keys_waiting_for_a_shared_limit_take_turns(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """Shared limit 1, two accounts with work parked: when a run ends and
    its slot of the shared limit goes to the other account's waiting head,
    its own account's next task is held and its account noted behind (it
    makes way), so the accounts alternate: j0, k0, j1, k1."""
    keys_take_turns(Scene(start, redis_url, redis_client, shared=1))


def keys_take_turns(scene: Scene) -> None:
    """The body of :func:`test_keys_waiting_for_a_shared_limit_take_turns`
    (shared limit 1), on ``scene``'s Redis."""
    scene.worker()
    first = scene.call("j", 0, gate=True)
    scene.wait_started(("j", 0))
    k0 = scene.call("k", 0, duration=0.1)
    scene.wait_noted("k")
    rest = [scene.call("k", 1, duration=0.1)]
    scene.wait_parked("k", 2)
    rest.append(scene.call("j", 1, duration=0.1))
    scene.wait_noted("k", "j")
    scene.open("j")
    for result in [first, k0, *rest]:
        assert result.get(timeout=60) in (0, 1)
    assert scene.starts() == [("j", 0), ("k", 0), ("j", 1), ("k", 1)]
    # k1 was held while j1 had the turn: never promoted only to be sent back
    assert not parked_waiting_for(scene.app, rest[0].id)


def test_an_account_new_to_the_round_goes_before_one_that_had_its_turn(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """Shared limit 1: j and k wait; k is woken (its turn) and noted again at
    the back; then a light account l arrives while k0 runs: l is noted
    before k, not behind it (docs/park.md, "Rounds"), so l0 starts before
    k1, and the heavy accounts still alternate: j0, k0, j1, l0, k1."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    first, k0 = scene.holder_and_waiter("j", "k")
    rest = [scene.call("k", 1, duration=0.1)]
    scene.wait_parked("k", 2)
    rest.append(scene.call("j", 1, duration=0.1))
    scene.wait_noted("k", "j")
    scene.open("j")
    scene.wait_started(("k", 0))
    scene.wait_noted("j", "k")  # k had its turn: noted again, at the back
    rest.append(scene.call("l", 0, duration=0.1))
    scene.wait_noted("j", "l", "k")
    scene.open("k")
    for result in [first, k0, *rest]:
        assert result.get(timeout=60) in (0, 1)
    assert scene.starts() == [("j", 0), ("k", 0), ("j", 1), ("l", 0), ("k", 1)]


def test_a_raised_override_of_a_listed_limit_fills_its_new_slot_at_once(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """Shared limit 1, held by a0 (gated); b0 waits for it (noted, its park
    held; the fallback hold is 120 s here).  ``celery redislock limit set
    shared --limit 2``: docs/rate.md ("a **raised** limit fills its new
    slots at once") and docs/limits-and-eager.md ("A run-time override of
    the name ... applies to it like to any name") promise b0 starts now,
    beside a0: the override notes the name for the sweepers
    (``limit_changed.lua``), which wake the keys waiting for it
    (``wake_changed_limits``).  Without that, b0 stayed held until a
    release of the limit or its hold's end."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    a0, b0 = scene.holder_and_waiter("a", "b")
    assert scene.status("b").waits_for == SHARED
    try:
        cli(scene.app, "limit", "set", SHARED, "--limit", "2")
        wait_for(
            lambda: ("b", 0) in scene.starts(),
            20,
            message="b0 started in the slot the raised limit added (a0 still running)",
        )
        assert len(scene.holders(SHARED)) == 2
    finally:
        scene.open("a", 0)
        scene.open("b", 0)
    assert a0.get(timeout=60) == 0
    assert b0.get(timeout=150) == 0
    assert most_at_once(scene.events()) <= 2


def test_a_forced_release_of_a_listed_limit_wakes_the_key_waiting_for_it(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """docs/cli.md: "A freed slot is handed to the first waiter as a normal
    release would".  Shared limit 1, held by a0 (gated); b0 waits for it as
    a listed limit (noted, its park held; the fallback hold is 120 s here).
    ``celery redislock release shared --force`` wakes b (``room_came_back``:
    the sweepers' ``wake_changed_limits``), not its hold's end."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    a0, b0 = scene.holder_and_waiter("a", "b")
    assert scene.status("b").waits_for == SHARED
    try:
        cli(scene.app, "release", SHARED, "--force")
        wait_for(
            lambda: ("b", 0) in scene.starts(),
            20,
            message="b0 started in the slot the forced release freed",
        )
    finally:
        scene.open("a", 0)
        scene.open("b", 0)
    assert a0.get(timeout=60) == 0
    assert b0.get(timeout=150) == 0


def test_a_wake_up_that_reaches_a_task_without_the_limit_goes_on_to_the_next_key(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """docs/limits-and-eager.md: every release of the limit wakes the first
    noted key.  Shared limit 1.  b0 (lists it) waits for it with b1 of
    ``charge_plain`` (same key, no ``Limit``) parked behind; at b0's turn b
    is noted again, behind d0 (new to the round); at d0's turn d1 is noted
    behind b.  d0's release reaches b, whose head b1 does not take the
    limit: the wake-up goes on to d (the fallback hold is 120 s here), so
    the limit is not left idle while d1 waits."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    a0, b0 = scene.holder_and_waiter("a", "b")
    b1 = scene.app.tasks["listed.charge_plain"].apply_async(("b", 1), {"duration": 0.1})
    scene.wait_parked("b", 2)
    scene.open("a")
    assert a0.get(timeout=60) == 0
    scene.wait_started(("b", 0))
    d0 = scene.call("d", 0, gate=True)
    scene.wait_noted("d", "b")
    scene.open("b")
    assert b0.get(timeout=60) == 0
    scene.wait_started(("d", 0))
    d1 = scene.call("d", 1, duration=0.1)
    scene.wait_noted("b", "d")
    scene.open("d")
    assert d0.get(timeout=60) == 0
    assert b1.get(timeout=60) == 1
    assert d1.get(timeout=30) == 1  # woken by d0's release, not the 120 s fallback
    assert scene.starts() == [("a", 0), ("b", 0), ("d", 0), ("d", 1)]


def test_a_raised_override_fills_every_new_slot_for_several_waiting_keys(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """As above, with three new slots and three tasks waiting for them: b0
    and b1 (b's own limit is 2) and c0, all gated; ``limit set shared
    --limit 4`` must start all three while a0 runs ("as many as it has room
    for", docs/limits-and-eager.md).  The sweeper counts each task it
    published as taking a slot only until it holds one: counted again as a
    holder, the limit looked full after two, and b1 waited for a release
    or its hold's end (found by an adversarial pass)."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    a0, b0 = scene.holder_and_waiter("a", "b")
    b1 = scene.call("b", 1, gate=True)
    scene.wait_parked("b", 2)
    c0 = scene.call("c", 0, gate=True)
    scene.wait_noted("b", "c")
    try:
        cli(scene.app, "limit", "set", SHARED, "--limit", "4")
        try:
            wait_for(
                lambda: {("b", 0), ("b", 1), ("c", 0)} <= set(scene.starts()),
                20,
                message="b0, b1 and c0 started in the new slots (a0 still running)",
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; starts: {scene.starts()}, holders: {len(scene.holders(SHARED))},"
                f" noted: {blocked(redis_client, scene.prefix)}, b: {scene.status('b')}"
            ) from None
        assert len(scene.holders(SHARED)) == 4
    finally:
        for call in (("a", 0), ("b", 0), ("b", 1), ("c", 0)):
            scene.open(*call)
        cli(scene.app, "limit", "clear", SHARED)
    assert [r.get(timeout=150) for r in (a0, b0, b1, c0)] == [0, 0, 1, 0]
    assert most_at_once(scene.events()) <= 4


def test_a_raised_rate_override_of_a_listed_limit_admits_the_next_start_at_once(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """``Limit("slow", 100, rate="1/h")``: a0's start books the next start
    of the limit an hour ahead.  ``limit set slow --rate 100/s`` (docs/rate.md:
    an override applies from the next start on) cuts that schedule to a full
    burst of the new rate (``override.lua``), so d0, another account's call
    sent after it, starts within seconds, not in an hour (found by an
    adversarial pass: the old rate's schedule stayed)."""
    scene = Scene(start, redis_url, redis_client, task="charge_slow_rated")
    scene.worker()
    a0 = scene.call("a", 0)
    scene.wait_started(("a", 0))
    try:
        cli(scene.app, "limit", "set", SLOW, "--rate", "100/s")
        d0 = scene.call("d", 0)
        try:
            wait_for(
                lambda: ("d", 0) in scene.starts(),
                30,
                message="d0 started under the raised rate, not an hour after a0",
            )
        except AssertionError as exc:
            found = f"starts {scene.starts()}, d: {scene.status('d')}"
            raise AssertionError(f"{exc}; {found}") from None
    finally:
        cli(scene.app, "limit", "clear", SLOW)
    assert (a0.get(timeout=60), d0.get(timeout=60)) == (0, 0)


@pytest.mark.parametrize("holder_task", ["charge", "charge_wait", "charge_skip"])
def test_a_release_by_a_task_of_another_policy_wakes_the_parked_key(
    start: Any, redis_url: str, redis_client: redis.Redis, holder_task: str
) -> None:
    """docs/limits-and-eager.md: "Every release of a listed lease of the limit
    (by whichever worker ...) wakes the first noted key"; "two task types that
    list Limit("stripe", 20) share the 20".  A run of ``holder_task`` (retry,
    wait or skip policy; same ``Limit(shared)``) holds the shared limit (1)
    on one worker; b0 of ``charge_park`` waits for it on another worker.
    Its release must wake b (fallback 120 s)."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    scene.worker(concurrency=2)
    scene.worker(concurrency=2)
    holder = scene.app.tasks[f"listed.{holder_task}"].apply_async(("a", 0), {"gate": True})
    wait_for(
        lambda: any(
            e["what"] == "start"
            for e in scene.app.recorder.events(holder_task, "all")  # type: ignore[attr-defined]
        ),
        60,
        message="a0 started",
    )
    b0 = scene.call("b", 0, duration=0.1)
    scene.wait_noted("b")
    scene.open("a")
    assert holder.get(timeout=60) == 0
    assert b0.get(timeout=20) == 0  # woken, not the 120 s fallback


def test_a_revoked_waiting_key_lets_the_next_noted_key_take_the_slot(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """docs/park.md: "A woken key that promotes nothing (its own slots full,
    its park empty, ...) lets the next noted key try (WAKE_TRIES)".  Shared
    limit 1 held by a0; b0 and then c0 wait (noted b, c).  b0 is revoked out
    of its park (``parking.revoke(app, id, name)``).  a0's release must
    start c0, not leave it for its 120 s hold."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    a0, b0 = scene.holder_and_waiter("a", "b")
    c0 = scene.call("c", 0, duration=0.1)
    scene.wait_noted("b", "c")
    # b0's gate is never opened: it must not run.
    assert park_revoke(scene.app, b0.id, "acct:b") == "parked"
    wait_for(lambda: b0.state == "REVOKED", 30, message="b0 REVOKED")
    scene.open("a")
    assert a0.get(timeout=60) == 0
    assert c0.get(timeout=20) == 0  # not the 120 s fallback
    assert ("b", 0) not in scene.starts()
    wait_for(lambda: not blocked(redis_client, scene.prefix), 30, message="nothing noted")


def test_a_revoked_held_task_of_a_woken_key_does_not_stall_the_next_key(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """Shared limit 1: a0 holds it; b0, b1 wait (b noted); c0 waits behind b.
    a0 ends: b is woken (b0 runs, b1 held, b noted again at the back, behind
    c).  b1 is revoked out of its park while b0 runs.  b0's release must pass
    the slot on to c (c0 starts at once, not after its 120 s hold), and b,
    with nothing parked, must not stay noted."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    a0, b0 = scene.holder_and_waiter("a", "b")
    b1 = scene.call("b", 1, duration=0.1)
    scene.wait_parked("b", 2)
    c0 = scene.call("c", 0, duration=0.1)
    scene.wait_noted("b", "c")
    scene.open("a")
    assert a0.get(timeout=60) == 0
    scene.wait_started(("b", 0))
    scene.wait_noted("c", "b")
    assert park_revoke(scene.app, b1.id, "acct:b") == "parked"
    scene.open("b")
    assert b0.get(timeout=60) == 0
    assert c0.get(timeout=20) == 0
    assert scene.starts() == [("a", 0), ("b", 0), ("c", 0)]
    wait_for(lambda: not blocked(redis_client, scene.prefix), 30, message="nothing noted")


def test_a_lowered_override_of_a_listed_limit_admits_no_start_until_below_it(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """docs/rate.md: "a **lowered** one admits no new start until fewer than
    the new limit run"; docs/limits-and-eager.md: "A run-time override of the
    name (celery redislock limit set stripe 10) applies to it like to any
    name".  Shared limit 3 (code), held by a0, b0, c0; ``limit set shared
    --limit 1``; d0 and e0 wait.  a0 and b0 end: nothing may start (two, then
    one, still run).  c0 ends: d0 or e0 starts, and they never run together."""
    scene = Scene(start, redis_url, redis_client, shared=3)
    scene.worker(concurrency=3)
    scene.worker(concurrency=3)
    holding = {a: scene.call(a, 0, gate=True) for a in ("a", "b", "c")}
    scene.wait_started(("a", 0), ("b", 0), ("c", 0))
    try:
        cli(scene.app, "limit", "set", SHARED, "--limit", "1")
        waiting = [scene.call(a, 0, duration=0.3) for a in ("d", "e")]
        wait_for(
            lambda: sorted(blocked(redis_client, scene.prefix)) == ["acct:d", "acct:e"],
            60,
            message="d and e noted",
        )
        for account in ("a", "b"):
            scene.open(account)
            assert holding[account].get(timeout=60) == 0
        # Two releases came; one holder (c0) is left at limit 1: nothing starts.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert set(scene.starts()) == {("a", 0), ("b", 0), ("c", 0)}, scene.starts()
            assert len(scene.holders(SHARED)) <= 1
            time.sleep(0.05)
        scene.open("c")
        assert holding["c"].get(timeout=60) == 0
        for result in waiting:
            assert result.get(timeout=60) == 0  # woken: not after 120 s
    finally:
        cli(scene.app, "limit", "clear", SHARED)
    later = [e for e in scene.events() if e["account"] in ("d", "e")]
    assert most_at_once(later) == 1


def test_a_rate_refused_head_under_a_make_way_hold_starts_at_its_rate_time(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """docs/limits-and-eager.md: "if a longer hold for the same limit is on
    already (a wake-up held the key's other tasks, or a run of the key made
    way), that head goes alone at its time".  charge_capped_rated: shared
    limit 1, one start per 10 s.  Shapes the case of a key that made way
    and whose next head is then refused by the rate: it must start when the
    rate admits it, not after the 120 s hold."""
    scene = Scene(start, redis_url, redis_client, task="charge_capped_rated", shared=1)
    a0, b0 = scene.holder_and_waiter("a", "b", duration=0.1)
    a1 = scene.call("a", 1, duration=0.1)
    scene.wait_parked("a", 1)
    scene.open("a")
    assert a0.get(timeout=60) == 0
    # a0's release wakes b (b0 promoted: refused by the rate, 10 s) and a makes way.
    assert b0.get(timeout=40) == 0
    assert a1.get(timeout=60) == 1  # not after the 120 s hold
    assert scene.starts() == [("a", 0), ("b", 0), ("a", 1)]
    assert most_at_once(scene.events()) == 1
    assert sent_back_by_a_limit(scene.app, b0.id) >= 1


def blocked_keys_without_ttl(client: redis.Redis, prefix: str, limit: str = SHARED) -> list[str]:
    """The blocked set of ``limit``, its limits and its turns that exist
    without a TTL (each must live ``BLOCKED_MEMORY_MS`` after its last write)."""
    base = f"{prefix}:{{{limit}}}:blocked"
    return [key for key in (base, f"{base}:limits", f"{base}:turns") if client.pttl(key) == -1]


@pytest.mark.parametrize("j1_sent", ["parked before k0 ends", "after j0 started"])
def test_the_key_that_made_way_is_served_before_the_key_it_gave_its_slot_to_goes_again(
    start: Any, redis_url: str, redis_client: redis.Redis, j1_sent: str
) -> None:
    """Shared limit 1.  k0 holds it (k's own key overridden to 1, so k's
    next task k1 waits on k's own key, not on the shared limit); j0 waits
    for the shared limit.  k0 ends: its slot goes to j (j0 starts) and k
    makes way, noted behind the waiting keys.  j's next task j1 was parked
    behind j0 already, or is sent after j0 started (j's own key has room:
    it is refused by the shared limit and noted).

    docs/park.md, "Taking turns": "So the limit passes from key to key in
    turn"; "Rounds": "no key has two turns in a round while another waits: a
    key that sends a task, is served, and sends another goes to the back".
    So when j0 ends, the slot goes to k (waiting since it made way), not
    to j a second time: k0, j0, k1, j1.  k is noted just before the names
    noted at or after the hand-off (``limit_release.lua`` replies its time),
    so before j, which that release noted again, or whose turn was
    recorded when its note was taken back.  Both variants got k0, j0, j1,
    k1 when k was noted at the time of its own note, and the record of
    j's turn was dropped while the set was empty."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    Overrides(redis_client, "acct:k", prefix=scene.prefix).set(limit=1)
    results = list(scene.holder_and_waiter("k", "j"))
    if j1_sent == "parked before k0 ends":
        results.append(scene.call("j", 1, duration=0.1))
        scene.wait_parked("j", 2)  # behind its held head j0
    results.append(scene.call("k", 1, duration=0.1))
    scene.wait_parked("k", 1)  # on k's own key (limit 1), not noted for the shared limit
    assert blocked(redis_client, scene.prefix) == ["acct:j"]
    scene.open("k", 0)
    scene.wait_started(("j", 0))
    if j1_sent == "after j0 started":
        scene.wait_noted("k")  # k made way; j's note was taken back (nothing left parked)
        results.append(scene.call("j", 1, duration=0.1))
    wait_for(
        lambda: sorted(blocked(redis_client, scene.prefix)) == ["acct:j", "acct:k"],
        60,
        message="j (its next task) and k (made way) noted",
    )
    order_noted = blocked(redis_client, scene.prefix)
    scene.open("j", 0)
    for result in results:
        assert result.get(timeout=60) in (0, 1)
    scene.wait_nothing_held(SHARED, "acct:j", "acct:k")
    assert blocked_keys_without_ttl(redis_client, scene.prefix) == []
    assert most_at_once(scene.events()) == 1
    assert scene.starts() == [("k", 0), ("j", 0), ("k", 1), ("j", 1)], (
        f"blocked set when j0 ended: {order_noted}"
    )


def test_a_child_killed_while_holding_wakes_the_key_waiting_for_its_limit(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """The child whose run holds the shared limit (1) is SIGKILLed; its
    worker's main process gives the slot back, and that release wakes the
    key whose head waits for the limit (its fallback retry is 120 s here,
    its lease ttl 30 s)."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    scene.worker(concurrency=2)
    doomed = scene.call("a", 0, gate=True)
    (first,) = scene.wait_started(("a", 0))
    waiting = scene.call("b", 0, duration=0.1)
    scene.wait_noted("b")
    os.kill(first["pid"], signal.SIGKILL)
    assert waiting.get(timeout=25) == 0  # before the 30 s ttl and the 120 s fallback
    with pytest.raises(Exception, match=r"(?i)worker"):
        doomed.get(timeout=60)
    assert scene.starts() == [("a", 0), ("b", 0)]
    assert blocked(redis_client, scene.prefix) == []


def test_park_holds_a_key_refused_by_a_listed_rate_until_the_rate_admits_it(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """A listed limit with a rate (one start per 10 s): the second account's
    run is refused by the rate, goes back to its park naming the limit, and
    starts once the rate admits it, not after the 120 s fallback; it is
    not noted as waiting for a slot (the limit has room)."""
    held_by_a_listed_rate(Scene(start, redis_url, redis_client, task="charge_rated"))


def held_by_a_listed_rate(scene: Scene) -> None:
    """The body of the test above (task ``charge_rated``), on ``scene``'s Redis."""
    scene.worker(concurrency=2)
    first = scene.call("a", 0, duration=0.1)
    scene.wait_started(("a", 0))
    second = scene.call("b", 0, duration=0.1)
    wait_for(lambda: parked_waiting_for(scene.app, second.id, REGION), 60, message="parked, rate")
    assert second.info["waits_for"] == REGION
    assert first.get(timeout=60) == 0
    assert second.get(timeout=60) == 0
    starts = [e for e in scene.events() if e["what"] == "start"]
    assert [e["account"] for e in starts] == ["a", "b"]
    assert starts[1]["t"] - starts[0]["t"] > 5.0  # one start per 10 s: not at once
    assert not scene.client.exists(f"{scene.prefix}:{{{REGION}}}:blocked")


def test_a_woken_head_refused_by_the_limits_rate_starts_when_the_rate_admits_it(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """Shared limit 1 with one start per 10 s: a0's release wakes key b (b0
    promoted, b1 held for the limit, 120 s here); b0 is then refused by the
    limit's rate.  b0 starts when the rate admits it, alone (b1 stays held),
    not when the 120 s hold for the rest ends; b1 follows the same way."""
    scene = Scene(start, redis_url, redis_client, task="charge_capped_rated", shared=1)
    scene.worker()
    b0, b1 = woken_with_the_rest_held(scene, 2, gate=True)
    scene.wait_started(("b", 0))
    assert sent_back_by_a_limit(scene.app, b0.id) == 2  # by the full limit, then by its rate
    assert scene.status("b").waits_for == SHARED  # b1: still held, not let go with b0
    scene.open("b")
    assert b0.get(timeout=30) == 0
    assert b1.get(timeout=60) == 1
    assert scene.starts() == [("a", 0), ("b", 0), ("b", 1)]
    starts = [e["t"] for e in scene.events() if e["what"] == "start"]
    assert starts[1] - starts[0] > 5.0 and starts[2] - starts[1] > 5.0  # the rate: 1 per 10 s


def test_a_child_killed_going_back_for_the_limits_rate_under_a_longer_hold(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """As above, but the child running b0 dies just after b0 went back to the
    head for the rate (its own slot not given back yet): the main process
    gives the slot back, and b0 still starts when the rate admits it, once,
    then b1; never two runs of the limit at once."""
    scene = Scene(start, redis_url, redis_client, task="charge_capped_rated", shared=1)
    holder, b0 = scene.holder_and_waiter("a", "b", duration=0.1)
    b1 = scene.call("b", 1, duration=0.1)
    scene.wait_parked("b", 2)
    fault = f"{scene.prefix}:fault:listed_parked"
    redis_client.set(fault, 1)  # b0's next way back to the head: the rate's
    scene.open("a")
    assert holder.get(timeout=30) == 0
    wait_for(lambda: not redis_client.exists(fault), 60, message="the kill")
    assert b0.get(timeout=60) == 0  # not after the 120 s hold
    assert b1.get(timeout=60) == 1
    # The kill came on b0's way back for the rate (its second), not on b1's.
    assert sent_back_by_a_limit(scene.app, b0.id) == 2
    assert scene.starts() == [("a", 0), ("b", 0), ("b", 1)]
    assert most_at_once(scene.events()) == 1
    scene.wait_nothing_held("acct:b", SHARED)


def woken_with_the_rest_held(scene: Scene, b_calls: int, **b0: Any) -> list[Any]:
    """a0 holds the shared limit (gated) and b waits with ``b_calls`` tasks
    (b0 with ``b0``'s options, the others of 0.1 s); a0 ends, and its
    release wakes b: b0 is promoted.  Returns b's results, in order."""
    holder = scene.call("a", 0, gate=True)
    scene.wait_started(("a", 0))
    b = [scene.call("b", 0, **b0)]
    scene.wait_noted("b")
    b += [scene.call("b", n, duration=0.1) for n in range(1, b_calls)]
    scene.wait_parked("b", b_calls)
    scene.open("a")
    assert holder.get(timeout=30) == 0
    return b


def test_a_woken_run_killed_leaves_its_keys_other_tasks_to_run_after_the_hold(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """A release of the shared limit (1) wakes key b: one task promoted, the
    other held for the limit.  The woken run's child is SIGKILLed: its
    slots are given back by the main process, and b's held task runs (woken
    by that release, or once the hold ends, 2 s here), never beside another
    run of the limit."""
    scene = Scene(start, redis_url, redis_client, listed_retry="2", shared=1)
    scene.worker()
    doomed, rest = woken_with_the_rest_held(scene, 2, gate=True)
    (woken,) = scene.wait_started(("b", 0))
    status = scene.status("b")
    assert (status.parked, status.waits_for) == (1, SHARED)  # b1 held, not promoted
    killed_at = time.time()
    os.kill(woken["pid"], signal.SIGKILL)
    with pytest.raises(Exception, match=r"(?i)worker"):
        doomed.get(timeout=60)
    assert rest.get(timeout=60) == 1
    history = scene.events()
    assert scene.starts() == [("a", 0), ("b", 0), ("b", 1)]
    a_ended = next(e["t"] for e in history if e["what"] == "end" and e["account"] == "a")
    b_starts = [e["t"] for e in history if e["what"] == "start" and e["account"] == "b"]
    assert a_ended <= b_starts[0] and killed_at <= b_starts[1]  # one run of the limit at a time


def test_a_woken_keys_held_tasks_follow_one_by_one_at_each_release(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """A release of the shared limit (1) wakes key b: one task promoted, the
    other two held for the limit and b noted again.  Each later release of
    the limit reaches b and promotes the next: b's tasks start at once, not
    when the hold ends (120 s here)."""
    scene = Scene(start, redis_url, redis_client, shared=1)
    scene.worker()
    first, *rest = woken_with_the_rest_held(scene, 3, gate=True)
    scene.wait_started(("b", 0))
    status = scene.status("b")
    assert (status.parked, status.waits_for) == (2, SHARED)  # held, not promoted
    scene.open("b")
    assert first.get(timeout=30) == 0
    assert [result.get(timeout=30) for result in rest] == [1, 2]  # not after 120 s
    assert scene.starts() == [("a", 0), ("b", 0), ("b", 1), ("b", 2)]
    assert most_at_once(scene.events()) == 1
    assert scene.status("b").waits_for is None
    assert blocked(redis_client, scene.prefix) == []


def test_a_woken_key_is_noted_again_so_another_keys_release_reaches_it(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """Shared limit 2, held by a0 and c0.  Key b (own limit 2) waits with two
    tasks; a0's release wakes it: b0 is promoted, b1 held for the limit and
    b noted again.  c0's release then reaches b and promotes b1, which runs
    beside b0 (the fallback is 120 s here)."""
    scene = Scene(start, redis_url, redis_client, shared=2)
    scene.worker()
    c0 = scene.call("c", 0, gate=True)
    scene.wait_started(("c", 0))
    b0, b1 = woken_with_the_rest_held(scene, 2, gate=True)
    scene.wait_started(("b", 0))
    scene.wait_noted("b")  # noted again, for b1
    assert scene.status("b").waits_for == SHARED
    scene.open("c")
    assert c0.get(timeout=30) == 0
    assert b1.get(timeout=30) == 1  # while b0 still runs: c0's release reached b
    scene.open("b")
    assert b0.get(timeout=30) == 0
    assert most_at_once(scene.events()) == 2


def test_a_key_woken_for_a_templated_limit_does_not_hold_its_other_tasks(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """``Limit("region:{region}", 1)``: b0 (eu) waits for region:eu; b1 (us)
    parks behind it.  a0's release of region:eu wakes b: b0 is promoted,
    and b1, which needs another region, is not held for region:eu (only a
    limit whose name is the same for every call holds the rest): it runs
    while b0 still does."""
    scene = Scene(start, redis_url, redis_client, task="charge_region")
    scene.worker()
    a0 = scene.call("a", 0, gate=True, region="eu")
    scene.wait_started(("a", 0))
    b0 = scene.call("b", 0, gate=True, region="eu")
    scene.wait_noted("b", limit="region:eu")
    b1 = scene.call("b", 1, duration=0.1, region="us")
    scene.wait_parked("b", 2)
    scene.open("a")
    assert a0.get(timeout=30) == 0
    assert b1.get(timeout=30) == 1  # while b0 still runs
    scene.open("b")
    assert b0.get(timeout=30) == 0
    assert scene.starts() == [("a", 0), ("b", 0), ("b", 1)]


def test_a_child_killed_after_waking_a_key_leaves_its_held_tasks_to_the_hold(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """a0 holds the shared limit (1); b0 and b1 wait.  a0's release wakes b
    and notes it again (b0 promoted and published, b1 held for the limit
    again) and the child is killed there: b0 runs, and b1 runs after it
    (woken by b0's release, or at the latest when the hold ends, 2 s here);
    each once, one at a time."""
    scene = Scene(start, redis_url, redis_client, listed_retry="2", shared=1)
    scene.worker()
    a0 = scene.call("a", 0, gate=True)
    scene.wait_started(("a", 0))
    b = [scene.call("b", 0, duration=0.1)]
    scene.wait_noted("b")
    b.append(scene.call("b", 1, duration=0.1))
    scene.wait_parked("b", 2)
    fault = f"{scene.prefix}:fault:listed_woken"
    redis_client.set(fault, 1)
    scene.open("a")
    wait_for(lambda: not redis_client.exists(fault), 60, message="the kill")
    with pytest.raises(Exception, match=r"(?i)worker"):
        a0.get(timeout=60)  # its child died in its release
    assert [result.get(timeout=60) for result in b] == [0, 1]
    assert scene.starts() == [("a", 0), ("b", 0), ("b", 1)]
    assert most_at_once(scene.events()) == 1
    wait_for(
        lambda: not scene.holders(SHARED) and not blocked(redis_client, scene.prefix),
        30,
        message="nothing held or noted",
    )


def held_for_shared(
    redis_url: str, redis_client: redis.Redis, account: str, count: int
) -> tuple[Celery, str, Parking, list[Any]]:
    """A listed app with no worker (promotions stay in the broker) whose
    ``charge_park`` key ``acct:<account>`` has ``count`` tasks parked (its
    two slots were taken, then given back without promoting) and held for
    the shared limit: the app, its prefix, the key's park and the calls."""
    config = worker_config(redis_url)
    prefix = config["prefix"]
    app = create_listed_app(config)
    task = app.tasks["listed.charge_park"]
    own = [FairSemaphore(redis_client, f"acct:{account}", 2, prefix=prefix) for _ in range(2)]
    assert all(lease.acquire(blocking=False) for lease in own)
    calls = [task.delay(account, n) for n in range(count)]  # its key full: all parked
    parking = Parking(redis_client, prefix, f"acct:{account}")
    assert parking.status().parked == count
    for lease in own:
        lease.release()  # plain releases: nothing promoted
    assert parking.hold_for(SHARED, 120)
    return app, prefix, parking, calls


def test_a_woken_key_whose_head_was_revoked_promotes_the_next_task(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A key found with room when it was to be noted (``wake_name``) whose
    parked head was revoked meanwhile: the revoked head is dropped, and it
    does not count as taking a slot of the shared limit: the key's next task
    is promoted in its place, and the rest stays held with the key noted."""
    from celery_redislock.parking import promotion

    app, prefix, parking, calls = held_for_shared(redis_url, redis_client, "r", 4)
    parking.record_revoke(calls[0].id)
    # Two tasks of other keys are on their way to the shared limit (3 slots).
    assert promotion.wake_name(app, "acct:r", SHARED, asks=3, in_flight=2)
    status = parking.status()
    assert (status.in_flight, status.parked, status.waits_for) == (1, 2, SHARED)
    assert calls[0].state == "REVOKED" and calls[1].state == "PROMOTED"
    assert blocked(redis_client, prefix) == ["acct:r"]


def test_a_wake_up_that_fails_midway_counts_what_it_published(
    redis_url: str,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``wake_waiting_for`` never raises, and when a Redis error stops it
    after it published (here: the second look for a name to wake), it
    returns what it published, so a run that woke the key still makes way."""
    from celery_redislock.parking import promotion

    app, prefix, parking, calls = held_for_shared(redis_url, redis_client, "f", 3)
    assert promotion.note_blocked(redis_client, prefix, "acct:f", SHARED, 3, 3, holds=True)
    looks = []
    real_wake = promotion.LIMIT_WAKE

    def second_look_fails(client: Any, keys: Any, args: Any) -> Any:
        looks.append(args)
        if len(looks) > 1:
            raise redis.ConnectionError("injected: the lock Redis went away")
        return real_wake(client, keys, args)

    monkeypatch.setattr(promotion, "LIMIT_WAKE", second_look_fails)
    assert promotion.wake_waiting_for(app, SHARED) == 1
    assert len(looks) == 2  # the shared limit had room for more: it looked again
    assert parking.status().in_flight == 1 and calls[0].state == "PROMOTED"
    assert "could not wake the names waiting for 'shared'" in caplog.text
    caplog.clear()  # its record holds the error's frames, and through them these results


def test_a_dead_holders_clean_up_publishes_what_it_gave_back_before_a_release_fails(
    redis_url: str,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A process of this machine died holding a slot of ``acct:d`` (whose
    parked task the release promotes) and one of the shared limit.  The
    clean-up gives every name back before it publishes; when the shared
    limit's release fails (a Redis error, injected), what was given back is
    still published (not left reserved until its deadline), the error is
    logged with the process's statement kept, and the next pass gives back
    the rest."""
    from celery_redislock.core import liveness
    from celery_redislock.core.capacity import Capacity
    from celery_redislock.core.keys import LiveKeys
    from celery_redislock.core.park import Verdict
    from celery_redislock.core.rate import NO_RATE
    from celery_redislock.core.scripts import LIVE_REGISTER
    from celery_redislock.parking import promotion

    space = liveness.process_space()
    assert space is not None, "process statements need Linux /proc"
    config = worker_config(redis_url)
    prefix = config["prefix"]
    app = create_listed_app(config)
    parking = Parking(redis_client, prefix, "acct:d")
    for owner in ("dead.1", "other.2"):  # both slots of acct:d (limit 2) taken
        assert parking.try_hold(Capacity.semaphore(2), owner, 30, "{}", NO_RATE).verdict is (
            Verdict.HELD
        )
    call = app.tasks["listed.charge_park"].delay("d", 0)  # its key full: parked
    assert parking.status().parked == 1
    shared = Parking(redis_client, prefix, SHARED)
    assert shared.try_hold(Capacity.semaphore(3), "dead.3", 30, "{}", NO_RATE).verdict is (
        Verdict.HELD
    )
    sleeper = subprocess.Popen(["sleep", "60"])
    process = liveness.identity(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    assert process is not None
    keys = LiveKeys(prefix, space)
    holdings = json.dumps({"acct:d": ["dead.1"], SHARED: ["dead.3"]}, sort_keys=True)
    LIVE_REGISTER(redis_client, [keys.index, keys.record(process)], [process, holdings, 60_000])
    real_release = Parking.release

    def fails_for_shared(self: Parking, owner: str, *args: Any) -> Any:
        if self.name == SHARED:
            raise redis.ConnectionError("injected: the lock Redis went away")
        return real_release(self, owner, *args)

    monkeypatch.setattr(Parking, "release", fails_for_shared)
    promotion.release_dead_holders(app)  # the error is logged, not raised
    assert "could not give back what dead process" in caplog.text
    caplog.clear()  # its record holds the error's frames
    status = parking.status(count=1)
    assert (status.parked, status.in_flight) == (0, 1)
    assert call.state == "PROMOTED"  # published, not only reserved
    monkeypatch.undo()
    seen: list[tuple[str, list[Any]]] = []
    real_publish = promotion._publish_all

    def publish(*args: Any) -> int:  # records what the shared limit holds at each publish
        seen.append((args[1].name, holders(redis_client, prefix, SHARED)))
        return real_publish(*args)

    monkeypatch.setattr(promotion, "_publish_all", publish)
    assert promotion.release_dead_holders(app) == 1  # the shared limit's slot, this time
    assert seen and all(held == [] for _, held in seen), seen  # given back before any publish
    assert holders(redis_client, prefix, SHARED) == []
    assert liveness.dead_processes(redis_client, prefix) == []


def test_a_wake_up_that_runs_out_of_tries_leaves_the_rest_unheld(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key woken while the shared limit has room for more than its tries
    (``WAKE_TRIES``, 2 here) promotes one per try; the last try lifts the
    hold instead of holding the rest again, so the key is not left held
    and unnoted (the sweeper promotes the rest as its own slots free)."""
    from celery_redislock.parking import promotion

    monkeypatch.setattr(promotion, "WAKE_TRIES", 2)
    app, prefix, parking, _ = held_for_shared(redis_url, redis_client, "k", 4)
    assert promotion.note_blocked(redis_client, prefix, "acct:k", SHARED, 3, 3, holds=True)
    assert promotion.wake_waiting_for(app, SHARED)
    status = parking.status()
    assert (status.in_flight, status.parked, status.waits_for) == (2, 2, None)
    assert blocked(redis_client, prefix) == []


def test_the_worker_metrics_count_a_run_once_and_a_refusal_once(
    start: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    """docs/observability.md: ``redislock_acquired_total`` counts runs (a run
    with a listed limit sends ``lock_acquired`` for each lease, with
    ``listed``), the ``wait`` histogram one per start, and a run the listed
    limit sent back counts once as ``contended{outcome="park"}`` (its
    ``lock_contended``; its ``lock_parked`` is not counted again), with its
    own slot given back as ``released{reason="limit"}``."""
    from tests.celery.test_metrics import sample, scrape

    port = free_port()
    scene = Scene(start, redis_url, redis_client, shared=1)
    scene.config["metrics_port"] = str(port)
    held, refused = scene.holder_and_waiter("a", "b", duration=0.1)
    scene.open("a")
    assert held.get(timeout=60) == 0 and refused.get(timeout=60) == 0
    scene.wait_nothing_held(SHARED, "acct:a", "acct:b")
    listed = [
        s
        for s in scene.app.recorder.signals()  # type: ignore[attr-defined]
        if s["signal"] == "redislock_acquired" and s.get("listed")
    ]
    assert [s["name"] for s in listed] == [SHARED, SHARED]  # the signals name each lease
    task = "listed.charge_park"

    def seen() -> dict[str, float]:
        samples = scrape(port)
        return {
            "acquired": sample(samples, "redislock_acquired_total", task=task),
            "wait": sample(samples, "redislock_wait_seconds_count", task=task),
            "park": sample(samples, "redislock_contended_total", task=task, outcome="park"),
            "finished": sample(samples, "redislock_released_total", task=task, reason="finished"),
            "limit": sample(samples, "redislock_released_total", task=task, reason="limit"),
        }

    wait_for(lambda: seen()["finished"] >= 2, 30, message="both releases counted")
    assert seen() == {"acquired": 2, "wait": 2, "park": 1, "finished": 2, "limit": 1}
