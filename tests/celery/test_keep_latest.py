"""``lock_policy="keep_latest"`` (policies/keep_latest.py) on real prefork
workers and a real Redis: a stampede runs the first call and the newest, every
other call ends ``SUPERSEDED`` naming the call that took its place, and every
call is followed by a run that started after it was made, through
``apply_async`` (at enqueue), ``send_task`` (at arrival), a SIGKILLed pool
child and a worker killed whole; with ``lock_debounce`` calls coalesce into
one run started no sooner than the quiet period after the last call, and a
stream of calls still runs every ``lock_debounce_max``."""

from __future__ import annotations

import itertools
import os
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from celery_redislock import PARKED, SUPERSEDED, FencedResource
from celery_redislock.core.park import Parking
from celery_redislock.settings import client_for
from tests.celery_apps.basic import create_app
from tests.celery_harness import worker_factory
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def config(redis_url: str) -> dict[str, str]:
    return {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", "park_sweep": "0.5"}


@pytest.fixture(scope="module")
def app(config: dict[str, str]) -> Any:
    return create_app(config)


@pytest.fixture(scope="module")
def worker(config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with worker_factory(tmp_path_factory.mktemp("keep-latest")) as start:
        yield start(config, pool="prefork", concurrency=2)


def runs(app: Any, key: str, task: str = "keep_latest") -> list[dict[str, Any]]:
    return [e for e in app.recorder.events(task, key) if e["what"] == "start"]


def open_gate(app: Any, config: dict[str, str], key: str) -> None:
    client_for(app)[0].set(f"{config['prefix']}:gate:{key}", 1)


def served_by(app: Any, task_id: str) -> str:
    """The task that ran in the place of ``task_id`` (following ``superseded_by``)."""
    result = app.AsyncResult(task_id)
    for _ in range(1000):
        if result.state != SUPERSEDED:
            return str(result.id)
        result = app.AsyncResult(result.info["superseded_by"])
    raise AssertionError(f"a cycle of superseded_by from {task_id}")


def called(send: Any, *args: Any) -> tuple[str, float]:
    """``send(*args)``: its task id, and the time just before it (every
    decision the call meets, in Redis time, comes later: a bound such as "no
    start before the call + 1.5 s" holds against it, not against the time
    the call returned)."""
    at = time.time()
    return send(*args).id, at


def check_every_call_served(
    app: Any, key: str, calls: list[tuple[str, float]], task: str = "keep_latest"
) -> None:
    """Each call's state is final, and the run that served it started after the call."""
    started = {e["id"]: e["t"] for e in runs(app, key, task)}
    for task_id, called_at in calls:
        state = app.AsyncResult(task_id).state
        assert state in ("SUCCESS", SUPERSEDED), (task_id, state)
        by = served_by(app, task_id)
        assert by in started and started[by] > called_at, (task_id, by)


def test_a_stampede_runs_the_first_call_and_the_newest(
    app: Any, worker: Any, config: dict[str, str]
) -> None:
    key = uuid.uuid4().hex[:8]
    task = app.tasks["basic.keep_latest"]
    calls: list[tuple[str, float]] = []
    for n in range(100):
        calls.append(called(task.delay, key, n, 60, True))
        if n == 0:
            wait_for(lambda: runs(app, key), 60, message="the first run")
    assert app.AsyncResult(calls[-1][0]).state == PARKED
    open_gate(app, config, key)
    for task_id, _ in (calls[0], calls[-1]):
        app.AsyncResult(task_id).get(timeout=60)
    assert [e["value"] for e in runs(app, key)] == [0, 99]
    for (older, _), (newer, _) in itertools.pairwise(calls[1:]):
        result = app.AsyncResult(older)
        assert result.state == SUPERSEDED and result.info["superseded_by"] == newer
    check_every_call_served(app, key, calls)
    superseded = [
        s
        for s in app.recorder.signals()
        if s["signal"] == "redislock_dropped"
        and s.get("reason") == "superseded"
        and s["name"] == f"latest:{key}"
    ]
    assert len(superseded) == 98


def test_a_countdown_call_counts_as_made_when_it_arrives(
    app: Any, worker: Any, config: dict[str, str]
) -> None:
    """docs/coalescing.md: ``apply_async(countdown=2)`` then ``delay()`` leaves
    the ``delay()`` call pending until the delayed one arrives and takes its
    place; the run that serves it starts after it was made (inngest PR #975:
    out-of-order events)."""
    key = uuid.uuid4().hex[:8]
    task = app.tasks["basic.keep_latest"]
    first = task.delay(key, 0, 60, True)
    wait_for(lambda: runs(app, key), 60, message="the first run")
    delayed = task.apply_async((key, 1), countdown=2)
    delayed_at = time.time()
    immediate = task.delay(key, 2)
    immediate_at = time.time()
    assert immediate.state == PARKED  # pending behind the running run
    wait_for(
        lambda: immediate.state == SUPERSEDED, 60, message="the delayed call to take its place"
    )
    assert immediate.info["superseded_by"] == delayed.id
    open_gate(app, config, key)
    first.get(timeout=60)
    delayed.get(timeout=60)
    assert [e["value"] for e in runs(app, key)] == [0, 1]
    check_every_call_served(app, key, [(delayed.id, delayed_at), (immediate.id, immediate_at)])


def test_calls_without_apply_async_are_replaced_at_arrival(
    app: Any, worker: Any, config: dict[str, str]
) -> None:
    key = uuid.uuid4().hex[:8]
    first = app.tasks["basic.keep_latest"].delay(key, 0, 60, True)
    wait_for(lambda: runs(app, key), 60, message="the first run")
    calls = [(first.id, 0.0)]
    for n in range(1, 11):  # as beat sends: no apply_async, decided where it arrives
        calls.append(called(app.send_task, "basic.keep_latest", (key, n, 0.2)))

    def settled() -> bool:
        states = [app.AsyncResult(i).state for i, _ in calls[1:]]
        return states.count(PARKED) == 1 and states.count(SUPERSEDED) == 9

    wait_for(settled, 60, message="one parked, nine superseded")
    # Read before the gate opens: the pending call leaves PARKED once promoted.
    pending = next(i for i, _ in calls[1:] if app.AsyncResult(i).state == PARKED)
    open_gate(app, config, key)
    app.AsyncResult(pending).get(timeout=60)
    assert len(runs(app, key)) == 2
    check_every_call_served(app, key, calls)


def test_the_pending_run_survives_a_sigkill_of_the_running_child(
    app: Any, worker: Any, config: dict[str, str]
) -> None:
    key = uuid.uuid4().hex[:8]
    task = app.tasks["basic.keep_latest"]
    calls = [(task.delay(key, 0, 60, True).id, time.time())]
    first = wait_for(lambda: runs(app, key), 60, message="the first run")[0]
    calls += [(task.delay(key, n, 0.2).id, time.time()) for n in range(1, 6)]
    os.kill(first["pid"], signal.SIGKILL)  # the main process gives the lock back
    app.AsyncResult(calls[-1][0]).get(timeout=90)
    assert [e["value"] for e in runs(app, key)] == [0, 5]
    wait_for(
        lambda: app.AsyncResult(calls[0][0]).state == "FAILURE",
        90,
        message="the killed run's FAILURE",
    )
    for task_id, _ in calls[1:-1]:
        assert app.AsyncResult(task_id).state == SUPERSEDED
    started = {e["id"]: e["t"] for e in runs(app, key)}
    assert all(started[served_by(app, i)] > t for i, t in calls[1:])


def test_eager_calls_each_run(app: Any) -> None:
    key = uuid.uuid4().hex[:8]
    results = [app.tasks["basic.keep_latest"].apply((key, n, 0.01)) for n in range(3)]
    assert [r.state for r in results] == ["SUCCESS"] * 3
    assert [e["value"] for e in runs(app, key)] == [0, 1, 2]


def test_a_worker_killed_whole_with_a_pending_run_loses_nothing(
    redis_url: str, tmp_path: Any
) -> None:
    """Main process and children SIGKILLed while a run holds the key and a call
    waits: a new worker runs the pending call (the dead holder's lock goes at
    its TTL or sooner, then its sweeper promotes)."""
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "3",
        "park_sweep": "0.5",
    }
    app = create_app(config)
    task = app.tasks["basic.keep_latest"]
    key = uuid.uuid4().hex[:8]
    with worker_factory(tmp_path) as start:
        first = start(config, pool="prefork", concurrency=2)
        calls = [(task.delay(key, 0, 60, True).id, time.time())]
        wait_for(lambda: runs(app, key), 60, message="the first run")
        calls += [(task.delay(key, n, 0.1).id, time.time()) for n in range(1, 4)]
        assert app.AsyncResult(calls[-1][0]).state == PARKED
        first.kill()  # nobody is left to release or to promote
        start(config, pool="prefork", concurrency=2)
        app.AsyncResult(calls[-1][0]).get(timeout=90)
    assert [e["value"] for e in runs(app, key)] == [0, 3]
    assert [app.AsyncResult(i).state for i, _ in calls[1:-1]] == [SUPERSEDED] * 2
    started = {e["id"]: e["t"] for e in runs(app, key)}
    assert all(started[served_by(app, i)] > t for i, t in calls[1:])


def test_debounced_calls_run_once_with_the_last_arguments_after_the_quiet_period(
    app: Any, worker: Any
) -> None:
    key = uuid.uuid4().hex[:8]
    calls: list[tuple[str, float]] = []
    for n in range(5):  # 0.1 s apart: within the 0.5 s quiet period of each other
        if n == 3:  # one of them as beat sends it: decided where it arrives
            calls.append(called(app.send_task, "basic.debounced", (key, n)))
        else:
            calls.append(called(app.tasks["basic.debounced"].delay, key, n))
        time.sleep(0.1)
    app.AsyncResult(calls[-1][0]).get(timeout=60)
    started = runs(app, key, "debounced")
    assert [e["value"] for e in started] == [4]
    assert started[0]["t"] >= calls[-1][1] + 0.5  # never before the quiet period
    wait_for(
        lambda: all(app.AsyncResult(i).state == SUPERSEDED for i, _ in calls[:-1]),
        30,
        message="four SUPERSEDED",
    )
    check_every_call_served(app, key, calls, "debounced")


def test_a_stream_of_debounced_calls_runs_every_max_wait(app: Any, worker: Any) -> None:
    key = uuid.uuid4().hex[:8]
    calls: list[tuple[str, float]] = []
    for n in range(20):  # every 0.2 s for 4 s: the calls never stop for 0.5 s
        calls.append(called(app.tasks["basic.debounced"].delay, key, n))
        time.sleep(0.2)
    app.AsyncResult(calls[-1][0]).get(timeout=60)
    started = runs(app, key, "debounced")
    # lock_debounce_max=1.5: the first run did not wait for the calls to stop,
    # and no run started sooner than 1.5 s after its burst's first call.
    assert len(started) >= 2 and started[0]["t"] < calls[-1][1]
    assert started[0]["t"] >= calls[0][1] + 1.5
    assert started[-1]["value"] == 19
    check_every_call_served(app, key, calls, "debounced")


def test_a_throttle_runs_the_leading_call_and_the_newest_at_the_end_of_the_window(
    app: Any, worker: Any
) -> None:
    key = uuid.uuid4().hex[:8]
    calls: list[tuple[str, float]] = []
    t0 = time.time()  # no start is scheduled before the first call
    for n in range(30):  # every 0.1 s for 3 s against a 1 s window
        calls.append(called(app.tasks["basic.throttled"].delay, key, n))
        time.sleep(0.1)
    app.AsyncResult(calls[-1][0]).get(timeout=60)
    started = runs(app, key, "throttled")
    assert started[0]["value"] == 0 and started[-1]["value"] == 29  # leading, trailing
    # One start per window at most: the k-th start no earlier than k windows
    # after the first call (a late body start, on a loaded machine, is fine;
    # 5 ms: a parked backlog's schedule lag, docs/rate.md; 1 ms: clock reads).
    early = [k for k, e in enumerate(started) if e["t"] < t0 + k * 1.0 - 0.006]
    assert not early, [round(e["t"] - t0, 3) for e in started]
    gaps = [b["t"] - a["t"] for a, b in itertools.pairwise(started)]
    assert all(gap > 0.5 for gap in gaps), gaps  # never two starts in one window
    assert len(started) <= 5  # 3 s of calls: windows at 0, 1, 2, 3 and the trailing one
    check_every_call_served(app, key, calls, "throttled")


def test_a_throttle_without_trailing_returns_the_windows_task(app: Any, worker: Any) -> None:
    key = uuid.uuid4().hex[:8]
    task = app.tasks["basic.throttled_leading"]
    results = [task.delay(key, n) for n in range(10)]
    assert {r.id for r in results} == {results[0].id}  # one message: the window's
    results[0].get(timeout=60)
    assert [e["value"] for e in runs(app, key, "throttled_leading")] == [0]
    wait_for(
        lambda: task.delay(key, 10).id != results[0].id,
        30,
        interval=0.1,
        message="the window to end",
    )


def test_a_debounced_call_survives_the_loss_of_every_worker(redis_url: str, tmp_path: Any) -> None:
    """The only worker is SIGKILLed (main process and children) while a debounced
    call waits for its quiet period: the call is in Redis, and the next worker's
    sweeper publishes it when it is due."""
    config = {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", "park_sweep": "0.5"}
    app = create_app(config)
    key = uuid.uuid4().hex[:8]
    with worker_factory(tmp_path) as start:
        first = start(config, pool="prefork", concurrency=2)
        calls = [(app.tasks["basic.debounced"].delay(key, n).id, time.time()) for n in range(3)]
        first.kill()
        assert app.AsyncResult(calls[-1][0]).state == PARKED
        start(config, pool="prefork", concurrency=2)
        app.AsyncResult(calls[-1][0]).get(timeout=60)
    assert [e["value"] for e in runs(app, key, "debounced")] == [2]
    check_every_call_served(app, key, calls, "debounced")


def test_supersede_stops_a_run_at_its_checkpoint_and_the_newer_call_runs_after(
    app: Any, worker: Any
) -> None:
    key = uuid.uuid4().hex[:8]
    task = app.tasks["basic.superseding"]
    first = task.delay(key, 1, True, 30)

    def first_wrote() -> bool:
        return any(e["what"] == "write" for e in app.recorder.events("superseding", key))

    wait_for(first_wrote, 60, message="the first run's first write")
    newer = task.delay(key, 2, True, 0.2)
    assert newer.get(timeout=60) == 2
    wait_for(lambda: first.state == SUPERSEDED, 30, message="the first run SUPERSEDED")
    assert first.info["superseded_by"] == newer.id and first.info["where"] == "run"
    events = app.recorder.events("superseding", key)
    ends = [e for e in events if e["what"] != "write"]
    # The first run stopped at a checkpoint (no "end"), before the newer started.
    assert [(e["what"], e["value"]) for e in ends] == [("start", 1), ("start", 2), ("end", 2)]
    first_writes = [e for e in events if e["what"] == "write" and e["value"] == 1]
    assert first_writes and all(e["accepted"] for e in first_writes)
    assert max(e["t"] for e in first_writes) < ends[1]["t"]


def test_a_superseded_run_that_goes_on_is_refused_by_the_guarded_resource(
    app: Any, worker: Any
) -> None:
    key = uuid.uuid4().hex[:8]
    task = app.tasks["basic.superseding"]
    first = task.delay(key, 1, False, 3)  # never calls checkpoint()
    wait_for(lambda: runs(app, key, "superseding"), 60, message="the first run")
    newer = task.delay(key, 2, False, 0.2)
    assert first.get(timeout=60) == 1  # it ran to its end ...
    assert newer.get(timeout=60) == 2
    events = app.recorder.events("superseding", key)
    writes = [e for e in events if e["what"] == "write" and e["value"] == 1]
    refused = [e for e in writes if not e["accepted"]]
    # ... but its writes after the newer call were refused, and the heartbeat
    # (ttl 3 s: every second) told it it was superseded.
    assert refused and all(not e["accepted"] for e in writes[writes.index(refused[0]) :])
    assert writes[-1]["superseded"]
    starts = {e["value"]: e["t"] for e in events if e["what"] == "start"}
    end_first = next(e["t"] for e in events if e["what"] == "end" and e["value"] == 1)
    assert starts[2] > end_first  # runs never overlap
    store = FencedResource(app.recorder.client, f"{app.conf.redislock_prefix}:{{sup:{key}}}:data")
    assert store.client.hget(store.key, "value") == b"2"


def _parked_at_head(app: Any, config: dict[str, str], key: str, task_id: str) -> bool:
    client = client_for(app)[0]
    status = Parking(client, config["prefix"], f"lretry:{key}").status(5)
    return bool(status.entries) and status.entries[0]["task_id"] == task_id


def test_the_pending_call_starts_after_the_running_runs_retries(
    app: Any, worker: Any, config: dict[str, str]
) -> None:
    """A run retries (countdown 5 s) while a newer call waits: the retry waits
    ahead of the park, a still newer call replaces the waiting call and not the
    retry, and the retry runs before it."""
    key = uuid.uuid4().hex[:8]
    task = app.tasks["basic.keep_latest_retrying"]
    first = task.delay(key, 0, 5.0)
    wait_for(lambda: runs(app, key, "keep_latest_retrying"), 60, message="the first run")
    waiting = task.delay(key, 1)
    assert waiting.state == PARKED
    opened_at = time.time()
    open_gate(app, config, key)  # the run retries
    wait_for(
        lambda: _parked_at_head(app, config, key, first.id),
        30,
        message="the retry stored ahead of the park",
    )
    newer = task.delay(key, 2)
    assert newer.get(timeout=60) == 2 and first.get(timeout=60) == 0
    assert waiting.state == SUPERSEDED and waiting.info["superseded_by"] == newer.id
    started = runs(app, key, "keep_latest_retrying")
    assert [(e["value"], e["retries"]) for e in started] == [(0, 0), (0, 1), (2, 0)]
    # the stored retry kept its countdown (GitLab MR 169823: deferred jobs
    # lost their ETA); 0.1 s for the timer's rounding, late is fine
    assert started[1]["t"] >= opened_at + 5.0 - 0.1
    ends = [e for e in app.recorder.events("keep_latest_retrying", key) if e["what"] == "end"]
    assert started[2]["t"] > ends[0]["t"]  # the newer call started after the retry ended
    parked = [
        s
        for s in app.recorder.signals()
        if s["signal"] == "redislock_parked"
        and s["name"] == f"lretry:{key}"
        and s["where"] == "retry"
    ]
    assert [s["task_id"] for s in parked] == [first.id]


def test_a_run_killed_just_after_storing_its_retry_still_retries_first(
    app: Any, worker: Any, config: dict[str, str]
) -> None:
    """The pool child SIGKILLs itself between storing its retry and giving its
    lock back: the main process releases the lock, the retry runs once after its
    countdown, then the waiting call; nothing runs twice and no state is FAILURE."""
    key = uuid.uuid4().hex[:8]
    task = app.tasks["basic.keep_latest_retrying"]
    first = task.delay(key, 0, 0.5, True)
    wait_for(lambda: runs(app, key, "keep_latest_retrying"), 60, message="the first run")
    waiting = task.delay(key, 1)
    open_gate(app, config, key)
    assert waiting.get(timeout=90) == 1 and first.get(timeout=60) == 0
    started = runs(app, key, "keep_latest_retrying")
    assert [(e["value"], e["retries"]) for e in started] == [(0, 0), (0, 1), (1, 0)]
    assert first.state == "SUCCESS"
