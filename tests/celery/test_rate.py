"""Per-key rate limits on tasks (docs/rate.md) against real prefork workers and a real Redis.

Starts are checked against Redis time: a start of the k-th task of a key
(0-based, in start order) cannot happen before ``T0 + (k + 1 - burst) /
rate - lag``, where ``T0`` is the Redis time before the first call, because
its rate's units were taken no earlier (GCRA, one Lua call; a parked
backlog's schedule may be kept ``lag`` = min(interval / 2, 5 ms) behind, see
docs/rate.md) and a start never precedes its admission.  That bound holds
however loaded the machine is: load only delays starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from celery_redislock import PARKED, LockedTask, RateLimitedTask, RateLimiter, SemaphoreTask
from celery_redislock.core.errors import LockContended
from celery_redislock.core.park import Parking
from celery_redislock.settings import client_for
from tests import kombu_restore
from tests.celery.test_scenarios import max_overlap
from tests.celery_apps.basic import create_app
from tests.celery_harness import worker_factory
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def config(redis_url: str) -> dict[str, str]:
    return {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "rate": "5/s",
        "park_sweep": "1",
    }


@pytest.fixture(scope="module")
def app(config: dict[str, str]) -> Any:
    return create_app(config)


@pytest.fixture(scope="module")
def worker(config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with worker_factory(tmp_path_factory.mktemp("rate")) as start:
        yield start(config, pool="prefork", concurrency=4)


@pytest.fixture
def key() -> str:
    return f"r{uuid.uuid4().hex[:8]}"


def redis_now(app: Any) -> float:
    client, _ = client_for(app)
    seconds, micros = client.time()
    return float(seconds) + micros / 1_000_000


def starts(app: Any, task: str, key: str) -> list[dict[str, Any]]:
    events = app.recorder.events(task, key)
    return sorted((e for e in events if e["what"] == "start"), key=lambda e: e["t"])


def assert_spaced(started: list[dict[str, Any]], t0: float, rate: float, burst: int = 1) -> None:
    lag = min(0.5 / rate, 0.005)
    for k, event in enumerate(started):
        earliest = t0 + (k + 1 - burst) / rate - lag
        assert event["t"] >= earliest - 0.001, f"start {k} at {event['t'] - t0:.3f} s"


def signals_of(app: Any, name: str) -> list[dict[str, Any]]:
    return [s for s in app.recorder.signals() if s["signal"] == name]


def test_a_backlog_starts_at_its_rate_and_waits_in_the_park(
    app: Any, worker: Any, key: str
) -> None:
    task = app.tasks["basic.rated"]
    t0 = redis_now(app)
    results = [task.delay(key, n) for n in range(12)]
    # Over-rate work waits in Redis, not in the broker: parked at enqueue.
    assert [r.state for r in results[1:]] == [PARKED] * 11
    for r in results:
        r.get(timeout=60)
    started = starts(app, "rated", key)
    assert [e["n"] for e in started] == list(range(12))  # FIFO per key
    assert_spaced(started, t0, rate=5)
    # The second call found the key free of parked work but over its rate: it
    # waits for its rate (lock_rate_limited); the others wait behind it (lock_parked).
    waits = [s for s in signals_of(app, "redislock_rate_limited") if s["name"] == f"rate:{key}"]
    assert [s["task_id"] for s in waits] == [results[1].id]
    assert 0 < waits[0]["retry_after"] <= 0.2 and waits[0]["where"] == "enqueue"
    parked = [s for s in signals_of(app, "redislock_parked") if s["name"] == f"rate:{key}"]
    assert [s["task_id"] for s in parked] == [r.id for r in results[1:]]


def test_other_keys_do_not_wait_behind_a_throttled_one(app: Any, worker: Any, key: str) -> None:
    task = app.tasks["basic.rated"]
    heavy = [task.delay(f"{key}-heavy", n) for n in range(25)]  # 5 s of backlog at 5/s
    light = task.delay(f"{key}-light", 0)
    light.get(timeout=60)
    heavy_started = starts(app, "rated", f"{key}-heavy")
    assert len(heavy_started) < 25, "the light key started before the heavy backlog ended"
    for r in heavy:
        r.get(timeout=60)


def test_rate_and_cap_together_never_exceed_either(app: Any, worker: Any, key: str) -> None:
    task = app.tasks["basic.rated_capped"]
    t0 = redis_now(app)
    results = [task.delay(key, n, 0.5) for n in range(8)]
    for r in results:
        r.get(timeout=60)
    events = app.recorder.events("rated_capped", key)
    assert max_overlap(events) <= 2
    assert_spaced(starts(app, "rated_capped", key), t0, rate=10)


def test_a_cost_takes_that_many_units(app: Any, worker: Any, key: str) -> None:
    task = app.tasks["basic.rated_cost"]
    t0 = redis_now(app)
    results = [task.delay(key, 2, n) for n in range(4)]  # 2 units each at 4/s, burst 2
    for r in results:
        r.get(timeout=60)
    started = starts(app, "rated_cost", key)
    # Unit 2k+1 is admitted no earlier than t0 + (2k + 2 - burst) / rate - lag.
    for k, event in enumerate(started):
        assert event["t"] >= t0 + (2 * k + 2 - 2) / 4 - 0.005 - 0.001


def test_skip_and_raise_refuse_an_over_rate_start_visibly(app: Any, worker: Any, key: str) -> None:
    skip, fail = app.tasks["basic.rated_skip"], app.tasks["basic.rated_raise"]
    first_skip, first_fail = skip.delay(key, 0), fail.delay(key, 0)
    first_skip.get(timeout=30)
    first_fail.get(timeout=30)
    skipped, failed = skip.delay(key, 1), fail.delay(key, 1)
    wait_for(lambda: skipped.state == "SKIPPED", 30, message="SKIPPED")
    with pytest.raises(LockContended, match="over its rate"):
        failed.get(timeout=30)
    runs = [e for e in signals_of(app, "redislock_rate_limited") if e["where"] == "run"]
    assert {e["task_id"] for e in runs} >= {skipped.id, failed.id}
    assert all(55 < e["retry_after"] <= 60 for e in runs if e["task_id"] == skipped.id)


def test_retry_comes_back_when_the_rate_admits_it(app: Any, worker: Any, key: str) -> None:
    task = app.tasks["basic.rated_retry"]
    t0 = redis_now(app)
    results = [task.delay(key, n) for n in range(6)]
    for r in results:
        r.get(timeout=60)
    started = starts(app, "rated_retry", key)
    assert sorted(e["n"] for e in started) == list(range(6))
    assert_spaced(started, t0, rate=4)
    # Requeued by the rate (six calls at 4/s), yet the body's retries stay 0
    # and max_retries=0 did not drop one (sidekiq #3943, dramatiq #257).
    ids = {r.id for r in results}
    requeues = [
        s
        for s in app.recorder.signals()
        if s["signal"] == "redislock_rate_limited" and s.get("task_id") in ids
    ]
    assert len(requeues) >= 3, requeues
    assert [e["retries"] for e in started] == [0] * 6


def test_two_workers_share_one_rate(
    config: dict[str, str], key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Celery's ``rate_limit`` is per worker: N workers give N times the rate.
    A key's rate is kept in Redis: calls that reach two workers (``send_task``,
    decided at arrival by whichever worker gets them) start at 5/s in all."""
    config = {**config, "prefix": f"t-{uuid.uuid4().hex[:12]}"}  # a queue of its own
    app = create_app(config)
    with worker_factory(tmp_path_factory.mktemp("rate-two")) as start:
        start(config, pool="prefork", concurrency=2)
        start(config, pool="prefork", concurrency=2)
        t0 = redis_now(app)
        ids = [app.send_task("basic.rated", args=(key, n)).id for n in range(12)]
        for task_id in ids:
            app.AsyncResult(task_id).get(timeout=120)
    started = starts(app, "rated", key)
    assert sorted(e["n"] for e in started) == list(range(12))
    assert len({e["hostname"] for e in started}) == 2  # both workers ran some
    assert_spaced(started, t0, rate=5)


def test_a_pause_holds_every_start_of_its_key(app: Any, worker: Any, key: str) -> None:
    client, settings = client_for(app)
    # Read before the pause: its end (Redis time at the pause + 2 s) is no
    # earlier, however long the pause call takes on a loaded machine.
    paused_until = redis_now(app) + 2 - 0.002
    RateLimiter(client, f"rate:{key}", rate="5/s", prefix=settings.prefix).pause(2)
    task = app.tasks["basic.rated"]
    results = [task.delay(key, n) for n in range(3)]
    assert all(r.state == PARKED for r in results)
    shown = Parking(client, settings.prefix, f"rate:{key}").status()
    if redis_now(app) < paused_until - 0.2:  # read while the pause still ran
        assert shown.parked == 3 and 0 < shown.paused_for <= 2
        assert 0 < shown.head_due_in <= 2
    for r in results:
        r.get(timeout=60)
    assert all(e["t"] >= paused_until for e in starts(app, "rated", key))


def test_a_task_told_to_back_off_pauses_its_key_and_runs_again_first(
    app: Any, worker: Any, key: str
) -> None:
    """``self.redislock_pause(s)`` in a run (an upstream 429): no task of the key
    starts before the pause ends, the same task id goes back to the head of the
    park and runs again first, once, without a countdown retry."""
    app.recorder.client.set(f"{app.conf.redislock_prefix}:backoff:{key}", 1)
    task = app.tasks["basic.rated_backoff"]
    first = task.delay(key, 0, 1.5)
    wait_for(
        lambda: any(e["what"] == "paused" for e in app.recorder.events("rated_backoff", key)),
        30,
        message="the first run asked for a pause",
    )
    wait_for(lambda: first.state == PARKED, 30, message="back in the park")
    later = [task.delay(key, n) for n in range(1, 4)]
    assert all(r.state == PARKED for r in later)
    assert [r.get(timeout=60) for r in [first, *later]] == [0, 1, 2, 3]
    events = app.recorder.events("rated_backoff", key)
    paused_at = next(e["t"] for e in events if e["what"] == "paused")  # before the pause began
    after = [e for e in events if e["what"] == "start"][1:]
    assert [e["n"] for e in after] == [0, 1, 2, 3]  # the paused task first, then FIFO
    assert all(e["t"] >= paused_at + 1.5 - 0.002 for e in after)  # not before the pause ends
    assert next(e["id"] for e in events if e["what"] == "end") == first.id
    assert first.result == 0 and app.recorder.events("rated_backoff", key)[0]["retries"] == 0


def cli(app: Any, *args: str) -> str:
    """``celery redislock ARGS`` against the test app's Redis and prefix."""
    from celery.bin.celery import celery as celery_main
    from click.testing import CliRunner

    base = ["redislock", "--url", app.conf.redislock_url, "--prefix", app.conf.redislock_prefix]
    result = CliRunner().invoke(celery_main, [*base, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return str(result.output)


def test_a_pause_during_a_backlog_holds_it_and_resume_lets_it_go_at_once(
    app: Any, worker: Any, key: str
) -> None:
    """``celery redislock pause`` in the middle of a backlog: nothing of the key
    starts while it runs (promotions already in flight go back to the park at
    their claim); ``resume`` lets the backlog go on at once, not at the end
    the pause would have had."""
    task = app.tasks["basic.rated"]
    results = [task.delay(key, n) for n in range(10)]
    wait_for(lambda: len(starts(app, "rated", key)) >= 3, 60, message="three started")
    paused_at = redis_now(app)
    assert "paused 'rate:" in cli(app, "pause", f"rate:{key}", "600")
    wait_for(lambda: redis_now(app) > paused_at + 2, 10, message="two seconds of pause")
    during = [e for e in starts(app, "rated", key) if e["t"] > paused_at + 0.5]
    assert during == [], "a task of the key started during the pause"
    before = len(starts(app, "rated", key))
    assert "resumed 'rate:" in cli(app, "resume", f"rate:{key}")
    for r in results:
        r.get(timeout=60)  # within a minute: the pause of ten would have held them
    assert len(starts(app, "rated", key)) == 10 > before


def test_a_rate_lowered_and_raised_while_tasks_wait_applies_at_once(
    app: Any, worker: Any, key: str
) -> None:
    """``limit set KEY --rate``: a backlog parked at the code's 5/s slows to the
    override's 2/s, then runs at 50/s when raised, without a deploy.  Both
    checks are bounds load cannot fake: at 2/s at most 3 + 2 w starts fit in a
    window of w seconds (the in-flight promotion and the burst on top); at 2/s
    the rest could not all start within 8 s of the raise."""
    task = app.tasks["basic.rated"]
    results = [task.delay(key, n) for n in range(30)]
    wait_for(lambda: len(starts(app, "rated", key)) >= 3, 60, message="three started")
    lowered_at = redis_now(app)
    assert "rate 2/s" in cli(app, "limit", "set", f"rate:{key}", "--rate", "2/s")
    wait_for(lambda: redis_now(app) > lowered_at + 3, 10, message="three seconds at 2/s")
    raised_at = redis_now(app)
    assert "rate 50/s" in cli(app, "limit", "set", f"rate:{key}", "--rate", "50/s")
    for r in results:
        r.get(timeout=60)
    started = starts(app, "rated", key)
    slow = [e for e in started if lowered_at <= e["t"] <= raised_at]
    assert len(slow) <= 3 + 2 * (raised_at - lowered_at), f"{len(slow)} starts at 2/s"
    after = [e for e in started if e["t"] > raised_at]
    assert len(after) >= 18  # 30 - 3 - at most 9 in the slow window
    assert max(e["t"] for e in after) < raised_at + 8, "the raised rate did not apply"
    assert_spaced(after, raised_at, 50, burst=2)  # the override's rate still holds
    cli(app, "limit", "clear", f"rate:{key}")


def test_a_limit_raised_and_lowered_while_tasks_wait_applies_at_once(
    app: Any, worker: Any, key: str
) -> None:
    """``limit set KEY --limit`` on a SemaphoreTask (code: 2) with parked work:
    raised to 3, a third runs beside the two (impossible at 2); lowered to 1
    while three run, the rest run one at a time, each after every earlier run
    ended (an end is recorded before the release that admits the next)."""
    client, settings = client_for(app)
    name = f"park:{key}"
    task = app.tasks["basic.parked"]
    results = [task.delay(key, n, 60.0, True) for n in range(6)]  # gated: run until opened
    wait_for(lambda: len(starts(app, "parked", key)) == 2, 60, message="two started")
    assert "limit 3" in cli(app, "limit", "set", name, "--limit", "3")
    wait_for(lambda: len(starts(app, "parked", key)) == 3, 30, message="a third started")
    park_of = Parking(client, settings.prefix, name)
    wait_for(lambda: park_of.status().in_flight == 0, 30, message="no promotion in flight")
    assert (park_of.status().parked, park_of.status().limit) == (3, 3)
    assert len(park_of.status().entries) == 0 and len(starts(app, "parked", key)) == 3
    assert "limit 1" in cli(app, "limit", "set", name, "--limit", "1")
    client.set(f"{settings.prefix}:gate:{key}", 1)  # the three end; the rest run at once
    for r in results:
        r.get(timeout=60)
    events = app.recorder.events("parked", key)
    ends = sorted(e["t"] for e in events if e["what"] == "end")
    later = starts(app, "parked", key)[3:]
    assert len(later) == 3
    for k, event in enumerate(later):  # alone: after the ends of every run before it
        assert event["t"] > ends[k + 2], f"run {k + 3} started beside another"
    cli(app, "limit", "clear", name)


def test_rate_parked_work_survives_a_worker_killed_while_it_is_due(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory, key: str
) -> None:
    # acks_late: with early acks a run the kill interrupts is gone, as always in
    # Celery (README, "Production settings"); this test is about the parked ones.
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "rate": "4/s",
        "park_sweep": "0.5",
        "acks_late": "1",
        "visibility": "4",
    }
    app = create_app(config)
    task = app.tasks["basic.rated"]
    with worker_factory(tmp_path_factory.mktemp("rate-kill")) as start:
        first = start(config, pool="prefork", concurrency=2)
        results = [task.delay(key, n) for n in range(12)]
        wait_for(lambda: len(starts(app, "rated", key)) >= 3, 60, message="three started")
        first.kill()  # the whole worker, SIGKILL: nobody releases or re-publishes
        start(config, pool="prefork", concurrency=2)
        for r in results:  # a run the kill interrupted comes back after the visibility
            r.get(timeout=4 + kombu_restore.restore_cadence() + 60)
    ran = [e["n"] for e in starts(app, "rated", key)]
    assert sorted(set(ran)) == list(range(12))


def test_bad_rate_options_fail_at_decoration() -> None:
    app = Celery("bad-rates", set_as_current=False)
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"base": RateLimitedTask, "rate_key": "k:{a}", "rate": "fast"}, ValueError, "rate"),
        ({"base": RateLimitedTask, "rate_key": "k:{a}", "rate": 0}, ValueError, "positive"),
        ({"base": RateLimitedTask, "rate_key": "k:{a}"}, TypeError, "needs rate="),
        (
            {
                "base": SemaphoreTask,
                "semaphore_key": "k:{a}",
                "semaphore_limit": 2,
                "rate_burst": 5,
            },
            ValueError,
            "rate_burst and rate_cost need rate=",
        ),
        (
            {"base": LockedTask, "lock_key": "k:{a}", "rate_cost": lambda a: 2},
            ValueError,
            "rate_burst and rate_cost need rate=",
        ),
        (
            {"base": RateLimitedTask, "rate_key": "k:{a}", "rate": "5/s", "rate_cost": 3},
            ValueError,
            "above the burst 1",
        ),
        (
            {"base": RateLimitedTask, "rate_key": "k:{a}", "rate": "5/s", "rate_burst": 0},
            ValueError,
            "rate_burst",
        ),
        (
            {"base": RateLimitedTask, "rate_key": "k:{a}", "rate": "5/s", "lock_policy": "wait"},
            ValueError,
            "does not combine with rate",
        ),
        (
            {
                "base": SemaphoreTask,
                "semaphore_key": "k:{a}",
                "semaphore_limit": 2,
                "rate_key": "other:{a}",
                "rate": "5/s",
            },
            TypeError,
            "rate_key",
        ),
        (
            {"base": RateLimitedTask, "rate_key": "k:{a}", "rate": lambda nope: "5/s"},
            ValueError,
            "not a parameter of the task",
        ),
    ]
    for i, (options, error, match) in enumerate(cases):
        with pytest.raises(error, match=match):

            @app.task(name=f"bad{i}", shared=False, **options)
            def job(a: int) -> None: ...

            app.tasks[f"bad{i}"]  # Celery builds the task class here


def test_a_callable_rate_that_returns_nonsense_fails_the_call(app: Any) -> None:
    bad = Celery("bad-call", set_as_current=False)
    bad.conf.redislock_url = app.conf.redislock_url

    @bad.task(
        name="plan",
        shared=False,
        base=RateLimitedTask,
        rate_key="k:{a}",
        rate=lambda a: "fast" if a else "5/s",
    )
    def plan(a: int) -> None: ...

    with pytest.raises(ValueError, match=r"rate\(a=1\)"):
        plan.apply_async((1,))
