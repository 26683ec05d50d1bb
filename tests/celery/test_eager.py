"""Locks, limits and de-duplication without a worker: eager mode, ``apply()``, plain calls.

* ``task_always_eager``: ``apply_async`` with ``lock_dedupe`` claims the
  enqueue marker like a real call, runs, and clears it when it returns; a
  duplicate made meanwhile (another process's queued message, or the body
  itself) is de-duplicated;
* a plain call ``task(...)`` runs the body without a lock and
  ``self.request.redislock`` is ``None``;
* retry detection looks at what the body raised, not at an outer exception
  being handled around ``apply()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from celery.exceptions import Retry

from celery_redislock import FairSemaphore, LockContended, LockedTask, RedisLock, SemaphoreTask
from celery_redislock import signals as lock_signals
from celery_redislock.enqueue.dedupe import claim, marker_key
from celery_redislock.enqueue.options import HEADER_DEDUPE


@pytest.fixture
def app(redis_url: str, prefix: str) -> Celery:
    app = Celery("eager", broker="memory://", set_as_current=False)
    app.conf.update(redislock_url=redis_url, redislock_prefix=prefix, task_always_eager=True)
    app.finalize()
    return app


def unique_task(app: Celery, **options: Any) -> Any:
    return app.task(name=f"eager.{uuid.uuid4().hex}", shared=False, **options)


@pytest.fixture
def released() -> Iterator[list[dict[str, Any]]]:
    """``lock_released`` signals sent while the test runs."""
    seen: list[dict[str, Any]] = []

    def receiver(sender: Any = None, **kwargs: Any) -> None:
        seen.append(kwargs)

    lock_signals.lock_released.connect(receiver, weak=False)
    try:
        yield seen
    finally:
        lock_signals.lock_released.disconnect(receiver)


# -- eager de-duplication ----------------------------------------------------------


def test_eager_call_claims_the_marker_while_it_runs_and_clears_it(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    runs: list[str] = []

    @unique_task(app, bind=True, base=LockedTask, lock_key="dd:{key}", lock_dedupe=True)
    def refresh(self: Any, key: int, again: bool = False) -> Any:
        runs.append(self.request.id)
        marker = redis_client.get(marker_key(prefix, f"dd:{key}", refresh.name))
        nested = refresh.delay(key).id if again else None  # a duplicate made while running
        return marker.decode() if marker else None, nested

    result = refresh.delay(1, True)
    marker, nested = result.get()
    assert marker == result.id  # claimed by this call, as a published one would
    assert nested == result.id  # the duplicate got this call's result, and did not run
    assert runs == [result.id]
    # cleared when it returned
    assert not redis_client.exists(marker_key(prefix, "dd:1", refresh.name))
    assert refresh.delay(1).id != result.id and len(runs) == 2  # so the next call runs


def test_eager_call_meets_a_message_queued_elsewhere(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    runs: list[int] = []

    @unique_task(app, base=LockedTask, lock_key="dd:{key}", lock_dedupe=True)
    def refresh(key: int) -> None:
        runs.append(key)

    assert claim(redis_client, prefix, "dd:2", refresh.name, "queued-by-a-web-process", 60) is None
    result = refresh.delay(2)
    assert result.id == "queued-by-a-web-process" and runs == []
    assert refresh.apply_async((2,), lock_dedupe=False).state == "SUCCESS" and runs == [2]
    assert redis_client.get(marker_key(prefix, "dd:2", refresh.name)) == b"queued-by-a-web-process"


@pytest.mark.parametrize("propagate", [False, True])
def test_eager_failure_clears_the_marker(
    app: Celery, redis_client: redis.Redis, prefix: str, propagate: bool
) -> None:
    app.conf.task_eager_propagates = propagate
    seen: list[bytes | None] = []

    @unique_task(app, base=LockedTask, lock_key="dd:{key}", lock_dedupe=True)
    def failing(key: int) -> None:
        seen.append(redis_client.get(marker_key(prefix, f"dd:{key}", failing.name)))
        raise ValueError("failing on purpose")

    if propagate:
        with pytest.raises(ValueError, match="on purpose"):
            failing.delay(3)
    else:
        assert failing.delay(3).state == "FAILURE"
    assert seen[0] is not None  # held while it ran
    assert not redis_client.exists(marker_key(prefix, "dd:3", failing.name))


def test_eager_retry_keeps_the_marker_then_clears_it(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    seen: list[tuple[int, bytes | None]] = []

    @unique_task(
        app, bind=True, base=LockedTask, lock_key="dd:{key}", lock_dedupe=True, max_retries=1
    )
    def flaky(self: Any, key: int) -> int:
        marker = redis_client.get(marker_key(prefix, f"dd:{key}", flaky.name))
        seen.append((self.request.retries, marker))
        if self.request.retries == 0:
            raise self.retry(countdown=0)
        return int(self.request.retries)

    result = flaky.delay(6)
    assert result.get() == 1
    assert seen == [(0, result.id.encode()), (1, result.id.encode())]  # kept through the retry
    assert not redis_client.exists(marker_key(prefix, "dd:6", flaky.name))


# -- eager locks and limits ---------------------------------------------------------


def test_eager_semaphore_with_a_per_account_limit(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    plans = {"acme": 2}

    @unique_task(
        app,
        bind=True,
        base=SemaphoreTask,
        semaphore_key="acct:{account}",
        semaphore_limit=lambda account, **_: plans[account],
        lock_policy="raise",
    )
    def sync(self: Any, account: str) -> Any:
        return self.request.redislock.limit, len(self.request.redislock.holders())

    other = FairSemaphore(redis_client, "acct:acme", 2, prefix=prefix)
    assert other.acquire()
    try:
        assert sync.delay("acme").get() == (2, 2)
        plans["acme"] = 1
        failed = sync.delay("acme")
        assert failed.state == "FAILURE" and isinstance(failed.result, LockContended)
    finally:
        other.release()
    assert sync.delay("acme").get() == (1, 1)


# -- plain calls -------------------------------------------------------------------


def test_plain_call_has_no_lease_and_the_readme_snippet_works(app: Celery) -> None:
    @unique_task(app, bind=True, base=LockedTask, lock_key="cache:{user_id}")
    def refresh_cache(self: Any, user_id: int) -> Any:
        lease = self.request.redislock  # README use case 1
        return lease.token if lease else None

    assert refresh_cache(7) is None  # plain call: the body, no lock
    assert isinstance(refresh_cache.apply((7,)).get(), int)  # an execution: the lock's token
    assert refresh_cache(7) is None  # nothing left over from the execution


def test_plain_call_inside_an_execution_of_another_task(app: Celery) -> None:
    @unique_task(app, bind=True, base=LockedTask, lock_key="inner:{x}")
    def inner(self: Any, x: int) -> Any:
        return self.request.redislock

    @unique_task(app, bind=True, base=LockedTask, lock_key="outer:{x}")
    def outer(self: Any, x: int) -> Any:
        return inner(x), self.request.redislock.name

    assert outer.apply((1,)).get() == (None, "outer:1")


# -- retry detection ----------------------------------------------------------------


def test_apply_inside_an_except_block_is_not_taken_for_a_retry(
    app: Celery, redis_client: redis.Redis, prefix: str, released: list[dict[str, Any]]
) -> None:
    app.conf.task_always_eager = False

    @unique_task(app, base=LockedTask, lock_key="r:{key}")
    def plain(key: int) -> str:
        return "done"

    task_id = uuid.uuid4().hex
    assert claim(redis_client, prefix, "r:4", plain.name, task_id, 60) is None
    try:
        raise Retry("an outer retry being handled")
    except Retry:
        result = plain.apply((4,), task_id=task_id, headers={HEADER_DEDUPE: 1})
    assert result.get() == "done"
    assert [s["reason"] for s in released if s["task_id"] == task_id] == ["finished"]
    # cleared: the task finished
    assert not redis_client.exists(marker_key(prefix, "r:4", plain.name))
    assert RedisLock(redis_client, "r:4", prefix=prefix).holders() == []


def test_a_body_that_retries_is_still_seen_as_retrying(
    app: Celery, released: list[dict[str, Any]]
) -> None:
    @unique_task(app, bind=True, base=LockedTask, lock_key="r:{key}", max_retries=2)
    def again(self: Any, key: int) -> int:
        if self.request.retries < 1:
            raise self.retry(countdown=0)
        return int(self.request.retries)

    result = again.delay(5)
    assert result.get() == 1
    assert [s["reason"] for s in released if s["task_id"] == result.id] == ["retry", "finished"]
