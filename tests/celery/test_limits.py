"""Per-call slot limits: ``semaphore_limit`` as a callable of the task's arguments.

Decoration-time checks of the callable, run-time checks of its result, the
calling convention, the clean-up of a dead run, and on a real worker: an
account's limit raised and lowered while its tasks run, without a restart,
never admitting anyone above the limit its own run was given.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import FairSemaphore, SemaphoreTask
from celery_redislock.core.owners import execution_prefix
from tests.celery_apps.limits import create_limits_app
from tests.celery_harness import worker_factory
from tests.waiting import wait_for


@pytest.fixture
def app(redis_url: str, prefix: str) -> Celery:
    app = Celery("limits", broker="memory://", set_as_current=False)
    app.conf.update(redislock_url=redis_url, redislock_prefix=prefix)
    app.finalize()
    return app


def unique_task(app: Celery, **options: Any) -> Any:
    return app.task(name=f"limits.{uuid.uuid4().hex}", shared=False, **options)


# -- decoration time -------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "error", "match"),
    [
        (lambda acount_id: 2, ValueError, r"parameter 'acount_id' is not a parameter of the task"),
        (lambda account_id, /: 2, TypeError, "positional-only"),
        (True, TypeError, "must be an int >= 1"),
        (0, ValueError, "must be >= 1"),
        (2.0, TypeError, "must be an int >= 1"),
    ],
)
def test_bad_limit_fails_at_decoration_naming_the_task(
    app: Celery, limit: Any, error: type[Exception], match: str
) -> None:
    name = f"limits.bad.{uuid.uuid4().hex}"
    with pytest.raises(error, match=match) as info:

        @app.task(
            name=name,
            shared=False,
            base=SemaphoreTask,
            semaphore_key="a:{account_id}",
            semaphore_limit=limit,
        )
        def sync(account_id: int, job: str = "") -> None: ...

    assert name in str(info.value)


def test_callable_gets_the_bound_arguments_by_keyword(app: Celery) -> None:
    seen: list[dict[str, Any]] = []

    def everything(**kwargs: Any) -> int:
        seen.append(kwargs)
        return 3

    @unique_task(
        app, base=SemaphoreTask, semaphore_key="a:{account_id}", semaphore_limit=everything
    )
    def sync(account_id: int, job: str = "full", *rest: Any, **extra: Any) -> None: ...

    assert sync.redislock_limit((7,), {"flag": True}) == 3
    # defaults applied, the task's **extra flattened in, *rest never passed
    assert seen == [{"account_id": 7, "job": "full", "flag": True}]

    @unique_task(
        app,
        base=SemaphoreTask,
        semaphore_key="a:{account_id}",
        semaphore_limit=lambda account_id: account_id + 1,
    )
    def narrow(account_id: int, job: str) -> None: ...

    assert narrow.redislock_limit((), {"account_id": 4, "job": "x"}) == 5


def test_a_callable_limit_needs_the_arguments_for_a_lease_set(app: Celery) -> None:
    @unique_task(
        app,
        base=SemaphoreTask,
        semaphore_key="a:{account_id}",
        semaphore_limit=lambda account_id, **_: 2,
    )
    def sync(account_id: int) -> None: ...

    with pytest.raises(TypeError, match="callable of the task's arguments"):
        sync.redislock_leaseset("a:1")
    assert sync.redislock_leaseset("a:1", limit=sync.redislock_limit((1,), {})).limit == 2


# -- run time ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (0, ValueError, "must be >= 1, got 0"),
        ("3", TypeError, "got str"),
        (True, TypeError, "got bool"),
        (None, TypeError, "got NoneType"),
    ],
)
def test_bad_limit_value_fails_the_run_without_the_body(
    app: Celery,
    redis_client: redis.Redis,
    prefix: str,
    value: Any,
    error: type[Exception],
    match: str,
) -> None:
    ran: list[int] = []

    @unique_task(
        app,
        base=SemaphoreTask,
        semaphore_key="a:{account_id}",
        semaphore_limit=lambda account_id, **_: value,
    )
    def sync(account_id: int) -> None:
        ran.append(account_id)

    result = sync.apply((9,))
    assert result.state == "FAILURE" and isinstance(result.result, error)
    message = str(result.result)
    assert match in message and sync.name in message and "account_id=9" in message
    assert ran == []
    assert FairSemaphore(redis_client, "a:9", 1, prefix=prefix).holders() == []


def test_limit_is_evaluated_per_run_and_recorded(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    plans = {"gold": 3, "free": 1}

    @unique_task(
        app,
        bind=True,
        base=SemaphoreTask,
        semaphore_key="acct:{account_id}",
        semaphore_limit=lambda account_id, **_: plans[account_id],
        lock_policy="raise",
    )
    def sync(self: Any, account_id: str) -> Any:
        lease = self.request.redislock
        [mine] = [h for h in lease.holders() if lease.lease and h.owner == lease.lease.owner]
        return lease.limit, mine.meta["limit"]

    assert sync.apply(("gold",)).get() == (3, 3)
    assert sync.apply(("free",)).get() == (1, 1)

    others = [FairSemaphore(redis_client, "acct:gold", 5, prefix=prefix) for _ in range(2)]
    assert all(o.acquire() for o in others)
    try:
        assert sync.apply(("gold",)).get() == (3, 3)  # 2 held, limit 3: admitted
        plans["gold"] = 2  # lowered: 2 held is already the limit
        lowered = sync.apply(("gold",))
        assert lowered.state == "FAILURE" and "is held" in str(lowered.result)
        plans["gold"] = 4  # raised: admitted at once, no restart
        assert sync.apply(("gold",)).get() == (4, 4)
    finally:
        for other in others:
            other.release()


def test_cleanup_of_a_dead_run_releases_even_if_the_limit_callable_fails(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    broken = {"now": False}

    def plan(account_id: int) -> int:
        if broken["now"]:
            raise ConnectionError("plan database down")
        return 2

    @unique_task(app, base=SemaphoreTask, semaphore_key="acct:{account_id}", semaphore_limit=plan)
    def sync(account_id: int) -> None: ...

    task_id, pid = uuid.uuid4().hex, os.getpid() + 100000  # a "dead child" that never existed
    held = sync.redislock_leaseset(
        "acct:5",
        limit=sync.redislock_limit((5,), {}),
        owner_prefix=execution_prefix(task_id, pid),
        task_id=task_id,
    )
    assert held.acquire()
    held._forget()  # this process forgets it (no renewal, no release), as a dead child would
    broken["now"] = True
    assert sync.redislock_cleanup(task_id, pid, (5,), {}, {}, "worker lost") == 1
    assert FairSemaphore(redis_client, "acct:5", 1, prefix=prefix).holders() == []


# -- a real worker: limits changed while the account's tasks run -----------------


@pytest.fixture(scope="module")
def config(redis_url: str) -> dict[str, str]:
    # No park sweeps: a parked task that runs here was promoted by a release.
    return {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
        "park_sweep": "3600",
    }


@pytest.fixture(scope="module")
def worker_app(config: dict[str, str]) -> Celery:
    return create_limits_app(config)


@pytest.fixture(scope="module")
def worker(config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with worker_factory(tmp_path_factory.mktemp("limits")) as start:
        yield start(config, module="tests.celery_apps.limits", pool="threads", concurrency=6)


def test_limit_raised_and_lowered_while_holders_run(
    worker_app: Celery, worker: Any, config: dict[str, str], redis_client: redis.Redis
) -> None:
    prefix, account = config["prefix"], "acme"
    task = worker_app.tasks["limits.plan_sync"]
    rec = worker_app.recorder  # type: ignore[attr-defined]

    def plan(value: int) -> None:
        redis_client.set(f"{prefix}:plan:{account}", value)

    def started() -> dict[int, dict[str, Any]]:
        return {e["n"]: e for e in rec.events("plan_sync", account) if e["what"] == "start"}

    def ended() -> dict[int, dict[str, Any]]:
        return {e["n"]: e for e in rec.events("plan_sync", account) if e["what"] == "end"}

    def contended(result: Any, after: float = 0.0) -> bool:
        return any(
            s["signal"] == "redislock_contended"
            and s.get("task_id") == result.id
            and s["t"] > after
            for s in rec.signals()
        )

    def open_gate(n: int) -> None:
        redis_client.set(f"{prefix}:gate:{account}:{n}", 1, ex=600)

    # Raising: plan 1, one holder; a second task is turned away.  After the
    # plan is raised it is still turned away while the plan-1 holder runs (that
    # holder's own limit says it is alone), and admitted, beside a third, on a
    # requeue after it ended: no restart.
    plan(1)
    a = [task.apply_async((account, 0, True))]
    wait_for(lambda: 0 in started(), 120, message="A0 started")
    a.append(task.apply_async((account, 1, True)))
    wait_for(lambda: contended(a[1]), 120, message="A1 turned away under plan 1")
    plan(3)
    raised_at = time.time()
    a.append(task.apply_async((account, 2, True)))
    wait_for(
        lambda: contended(a[1], raised_at) and contended(a[2], raised_at),
        120,
        message="A1, A2 turned away while the plan-1 holder runs",
    )
    assert not {1, 2} & set(started())
    open_gate(0)
    wait_for(lambda: {1, 2} <= set(started()), 120, message="A1, A2 admitted under plan 3")
    assert 2 not in ended() and 1 not in ended()  # they run side by side

    # Lowering to 1 while 2 run: newcomers wait until every holder is gone.
    plan(1)
    lowered_at = max(e["t"] for e in started().values())
    b = [task.apply_async((account, n)) for n in (10, 11)]
    wait_for(lambda: all(contended(r) for r in b), 120, message="B turned away under plan 1")
    open_gate(1)
    wait_for(lambda: 1 in ended(), 120, message="A1 ended")
    a1_end = ended()[1]["t"]
    # One holder left, still at the new limit: B keeps being turned away.
    wait_for(lambda: all(contended(r, a1_end) for r in b), 120, message="B asked again")
    assert not {10, 11} & set(started())
    open_gate(2)
    for result in a + b:
        result.get(timeout=120)

    starts, ends = started(), ended()
    assert starts[0]["limit"] == 1 and starts[1]["limit"] == starts[2]["limit"] == 3
    assert starts[10]["limit"] == starts[11]["limit"] == 1
    for n, start in starts.items():
        # Redis's own view when the body started: never above the run's limit,
        # and the holder meta records the limit of that run.
        assert start["holders"] <= start["limit"], (n, start)
        assert start["meta_limit"] == [start["limit"]], (n, start)
    assert min(starts[n]["t"] for n in (1, 2)) >= ends[0]["t"]
    last_a_end = max(ends[n]["t"] for n in (0, 1, 2))
    assert min(starts[n]["t"] for n in (10, 11)) >= last_a_end > lowered_at
    first, second = sorted((10, 11), key=lambda n: starts[n]["t"])
    assert starts[second]["t"] >= ends[first]["t"]  # one at a time under plan 1


def test_raised_limit_is_used_by_the_promotion_of_parked_tasks(
    worker_app: Celery, worker: Any, config: dict[str, str], redis_client: redis.Redis
) -> None:
    """Policy park: a release promotes by the account's limit *now*, not its own run's."""
    prefix, account = config["prefix"], "parked-plan"
    task = worker_app.tasks["limits.plan_sync_park"]
    rec = worker_app.recorder  # type: ignore[attr-defined]

    def started() -> dict[int, dict[str, Any]]:
        return {e["n"]: e for e in rec.events("plan_sync_park", account) if e["what"] == "start"}

    def ended() -> dict[int, dict[str, Any]]:
        return {e["n"]: e for e in rec.events("plan_sync_park", account) if e["what"] == "end"}

    redis_client.set(f"{prefix}:plan:{account}", 1)
    first = task.apply_async((account, 0, True))
    wait_for(lambda: 0 in started(), 120, message="the plan-1 run started")
    rest = [task.apply_async((account, n, True)) for n in (1, 2, 3)]
    wait_for(lambda: all(r.state == "PARKED" for r in rest), 120, message="the rest parked")
    redis_client.set(f"{prefix}:plan:{account}", 3)
    redis_client.set(f"{prefix}:gate:{account}:0", 1, ex=600)
    wait_for(lambda: {1, 2, 3} <= set(started()), 120, message="all three promoted at once")
    assert not {1, 2, 3} & set(ended())  # side by side, under the raised plan
    for n in (1, 2, 3):
        redis_client.set(f"{prefix}:gate:{account}:{n}", 1, ex=600)
    for result in [first, *rest]:
        result.get(timeout=120)
    assert all(started()[n]["holders"] <= 3 for n in (1, 2, 3))
