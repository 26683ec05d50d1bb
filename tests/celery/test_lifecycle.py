"""Every way a guarded task can end, against one real prefork worker.

The worker (concurrency 4) is shared by the module; tests keep apart by
using different key values.  Assertions read the records the task bodies
wrote and the lock state in Redis afterwards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.result import AsyncResult

from celery_redislock import SKIPPED, LockContended
from celery_redislock.enqueue.dedupe import marker_key
from tests.celery_apps.basic import create_app
from tests.celery_harness import WorkerProcess, worker_factory
from tests.waiting import wait_for

TTL = 30.0


@pytest.fixture(scope="module")
def config(redis_url: str) -> dict[str, str]:
    return {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", "ttl": str(TTL)}


@pytest.fixture(scope="module")
def app(config: dict[str, str]) -> Any:
    return create_app(config)


@pytest.fixture(scope="module")
def worker(config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with worker_factory(tmp_path_factory.mktemp("lifecycle")) as start:
        yield start(config, pool="prefork", concurrency=4)


@pytest.fixture
def key() -> str:
    return uuid.uuid4().hex[:10]


def holders(app: Any, task_name: str, *args: Any) -> list[Any]:
    task = app.tasks[task_name]
    return task.redislock_leaseset(task.redislock_name(args, {})).holders()


def result_of(app: Any, result: AsyncResult, timeout: float = 60.0) -> AsyncResult:
    wait_for(
        lambda: result.state not in ("PENDING", "STARTED", "RETRY"),
        timeout,
        message=f"task {result.id} to end (state {result.state})",
    )
    return result


def test_success_runs_under_the_lock_and_releases(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    result = app.tasks["basic.sleeper"].delay(key, 0.2)
    value = result.get(timeout=60)
    events = app.recorder.events("sleeper", key)
    assert [e["what"] for e in events] == ["start", "end"]
    assert events[0]["token"] == value["token"] and events[1]["owned"] is True
    assert value["name"] == f"sleep:{key}"
    assert holders(app, "basic.sleeper", key) == []


def test_duplicate_is_skipped_with_state_and_log(app: Any, worker: WorkerProcess, key: str) -> None:
    sleeper = app.tasks["basic.sleeper"]
    first = sleeper.delay(key, 3.0)
    wait_for(lambda: app.recorder.events("sleeper", key), 60, message="first to start")
    second = sleeper.delay(key, 0.1)
    wait_for(lambda: second.state == SKIPPED, 60, message="second to be SKIPPED")
    assert second.info == {"lock": f"sleep:{key}", "kind": "lock", "policy": "skip"}
    first.get(timeout=60)
    assert [e["id"] for e in app.recorder.events("sleeper", key) if e["what"] == "start"] == [
        first.id
    ]
    assert "skipped: lock 'sleep:" in Path(worker.log_path).read_text()
    assert holders(app, "basic.sleeper", key) == []


def signals_for(app: Any, task_id: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        s
        for s in app.recorder.signals()
        if s.get("task_id") == task_id and (name is None or s["signal"] == name)
    ]


def released(app: Any, task_id: str) -> list[dict[str, Any]]:
    return signals_for(app, task_id, "redislock_released")


def started(app: Any, task: str, key: str) -> list[dict[str, Any]]:
    return [e for e in app.recorder.events(task, key) if e["what"] == "start"]


def test_signals_acquired_and_released(app: Any, worker: WorkerProcess, key: str) -> None:
    result = app.tasks["basic.sleeper"].delay(key, 0.05)
    value = result.get(timeout=60)
    wait_for(lambda: released(app, result.id), 30, message="lock_released")
    acquired = signals_for(app, result.id, "redislock_acquired")
    assert [s["token"] for s in acquired] == [value["token"]]
    assert acquired[0]["name"] == f"sleep:{key}" and acquired[0]["kind"] == "lock"
    [rel] = released(app, result.id)
    assert rel["reason"] == "finished" and rel["held"] is True


def test_failure_releases(app: Any, worker: WorkerProcess, key: str) -> None:
    result = app.tasks["basic.fail"].delay(key)
    with pytest.raises(ValueError, match="failing on purpose"):
        result.get(timeout=60)
    assert result.state == "FAILURE"
    wait_for(lambda: released(app, result.id), 30, message="lock_released")
    assert holders(app, "basic.fail", key) == []


def test_retry_is_not_blocked_by_its_own_lock(app: Any, worker: WorkerProcess, key: str) -> None:
    # Policy skip: had the retry met the first attempt's lock it would end SKIPPED.
    result = app.tasks["basic.retrying"].delay(key, 2)
    assert result.get(timeout=60) == 2
    starts = started(app, "retrying", key)
    assert [e["retries"] for e in starts] == [0, 1, 2]
    assert len({e["token"] for e in starts}) == 3
    assert holders(app, "basic.retrying", key) == []
    assert [s["reason"] for s in released(app, result.id)] == ["retry", "retry", "finished"]


def test_autoretry_is_not_blocked_by_its_own_lock(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    result = app.tasks["basic.autoretrying"].delay(key, 2)
    assert result.get(timeout=60) == 2
    assert [e["retries"] for e in started(app, "autoretrying", key)] == [0, 1, 2]
    assert holders(app, "basic.autoretrying", key) == []


@pytest.mark.parametrize("task", ["ignoring", "rejecting"])
def test_ignore_and_reject_release(app: Any, worker: WorkerProcess, key: str, task: str) -> None:
    result = app.tasks[f"basic.{task}"].delay(key)
    wait_for(lambda: released(app, result.id), 60, message="lock_released")
    assert len(started(app, task, key)) == 1
    assert holders(app, f"basic.{task}", key) == []


def test_soft_time_limit_releases(app: Any, worker: WorkerProcess, key: str) -> None:
    result = app.tasks["basic.sleeper"].apply_async((key, 20), soft_time_limit=0.5)
    result_of(app, result)
    assert result.state == "FAILURE" and type(result.result).__name__ == "SoftTimeLimitExceeded"
    assert holders(app, "basic.sleeper", key) == []


def test_hard_time_limit_with_cooperative_child_releases(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    result = app.tasks["basic.sleeper"].apply_async((key, 60), time_limit=1.5)
    wait_until_running(app, "sleeper", key)
    assert_cleaned_up_by_main_process(app, worker, result, key, "finished", "time limit")
    result_of(app, result)
    assert result.state == "FAILURE" and type(result.result).__name__ == "TimeLimitExceeded"


def wait_until_running(app: Any, task: str, key: str) -> dict[str, Any]:
    starts = wait_for(lambda: started(app, task, key), 60, message=f"{task}({key}) to start")
    return starts[0]


def assert_cleaned_up_by_main_process(
    app: Any, worker: WorkerProcess, result: AsyncResult, key: str, *reasons: str
) -> None:
    # The TTL is 30 s: a release within 10 s is the main process's doing.
    wait_for(lambda: not holders(app, "basic.sleeper", key), 10, message="release")
    rels = wait_for(lambda: released(app, result.id), 10, message="lock_released")
    assert len(rels) == 1, rels
    [rel] = rels
    assert rel["reason"] in reasons and rel["held"] is True
    if rel["reason"] != "finished":
        assert rel["pid"] == worker.pid  # released by the main process


def test_hard_time_limit_released_by_main_process(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    # SIGTERM blocked in the body: billiard's TERM does nothing, its SIGKILL
    # ends the child, and only the main process can release.
    result = app.tasks["basic.stubborn"].apply_async((key, 60), time_limit=1.5)
    wait_until_running(app, "stubborn", key)
    assert_cleaned_up_by_main_process(app, worker, result, key, "time limit")
    result_of(app, result)
    assert result.state == "FAILURE" and type(result.result).__name__ == "TimeLimitExceeded"


@pytest.mark.parametrize(
    ("signame", "reasons"),
    [
        # SIGTERM: the child unwinds and releases itself, or the main process does.
        ("SIGTERM", ("finished", "terminated")),
        # SIGKILL: only the main process can.
        ("SIGKILL", ("terminated", "worker lost")),
    ],
)
def test_revoke_terminate_releases(
    app: Any, worker: WorkerProcess, key: str, signame: str, reasons: tuple[str, ...]
) -> None:
    result = app.tasks["basic.sleeper"].delay(key, 60)
    wait_until_running(app, "sleeper", key)
    assert holders(app, "basic.sleeper", key)
    app.control.revoke(result.id, terminate=True, signal=signame)
    assert_cleaned_up_by_main_process(app, worker, result, key, *reasons)
    wait_for(lambda: result.state == "REVOKED", 30, message="REVOKED")


def test_child_sigkill_released_by_main_process_within_a_second_or_so(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    result = app.tasks["basic.sleeper"].delay(key, 60)
    start = wait_until_running(app, "sleeper", key)
    assert start["pid"] in worker.children()
    killed_at = time.monotonic()
    os.kill(start["pid"], signal.SIGKILL)
    wait_for(lambda: not holders(app, "basic.sleeper", key), 10, message="release")
    freed_after = time.monotonic() - killed_at
    # Not the TTL (30 s), nor Celery's WorkerLostError (worker_lost_wait=20 s
    # in the test app): the main process noticed the dead child (~0.1 s).
    assert freed_after < 5
    assert_cleaned_up_by_main_process(app, worker, result, key, "worker lost")
    result_of(app, result)
    assert result.state == "FAILURE" and type(result.result).__name__ == "WorkerLostError"


def test_a_lock_key_callable_blocking_the_main_process_renewer_does_not_stop_the_clean_up(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    """The main process builds a running task's names for its renewals when
    the first renewal falls due (a third of the TTL), on a thread of its own:
    a ``lock_key`` callable that blocks there holds up renewals, not the
    watch that releases a dead child's lease."""
    prefix = app.conf.redislock_prefix
    result = app.tasks["basic.renewer_blocker"].delay(key, 60)
    try:
        start = wait_until_running(app, "renewer_blocker", key)
        blocked = f"{prefix}:renewer_blocked:{key}"
        blocker = wait_for(lambda: app.recorder.client.get(blocked), 30, message="a blocked key")
        assert int(blocker) == worker.pid  # in the main process, not the child
        os.kill(start["pid"], signal.SIGKILL)
        # A release by the main process, with its lock_released signal (the
        # lease left to expire, 3 s after the child's last renewal, sends none).
        wait_for(lambda: not holders(app, "basic.sleeper", key), 10, message="release")
        rels = wait_for(lambda: released(app, result.id), 10, message="lock_released")
        assert [(rel["reason"], rel["pid"]) for rel in rels] == [("worker lost", worker.pid)]
    finally:
        app.recorder.client.set(f"{prefix}:gate:{key}", 1)  # the renewer goes on


def test_raise_policy_per_call(app: Any, worker: WorkerProcess, key: str) -> None:
    sleeper = app.tasks["basic.sleeper"]
    first = sleeper.delay(key, 3)
    wait_until_running(app, "sleeper", key)
    second = sleeper.apply_async((key, 0.1), lock_policy="raise")
    result_of(app, second)
    assert second.state == "FAILURE"
    assert isinstance(second.result, LockContended), second.result
    first.get(timeout=60)
    assert len(started(app, "sleeper", key)) == 1


def test_wait_policy_runs_after_the_release(app: Any, worker: WorkerProcess, key: str) -> None:
    sleeper = app.tasks["basic.sleeper"]
    first = sleeper.delay(key, 1.5)
    wait_until_running(app, "sleeper", key)
    second = sleeper.apply_async((key, 0.1), lock_policy="wait", lock_wait_timeout=30)
    second.get(timeout=60)
    first.get(timeout=60)
    events = app.recorder.events("sleeper", key)
    first_end = next(e["t"] for e in events if e["id"] == first.id and e["what"] == "end")
    second_start = next(e["t"] for e in events if e["id"] == second.id and e["what"] == "start")
    assert second_start >= first_end
    # Woken by the release, not by the first lease running out (TTL 30 s).
    assert second_start - first_end < 10


def test_a_run_killed_while_it_waits_gives_up_its_place_and_releases_nothing(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    """``revoke(terminate=True, signal="SIGKILL")`` of a run that waits in the
    key's queue (policy ``wait``): the main process takes its place out of
    the queue, with an INFO line that says so, and sends no
    ``lock_released`` (it never held the key: no release, no reclaim in the
    metrics); the holder runs on and a later call gets the key."""
    sleeper = app.tasks["basic.sleeper"]
    first = sleeper.delay(key, 60)
    wait_until_running(app, "sleeper", key)
    waiting = sleeper.apply_async((key, 0.1), lock_policy="wait", lock_wait_timeout=120)
    leases = sleeper.redislock_leaseset(sleeper.redislock_name((key, 0.1), {}))
    wait_for(lambda: leases.waiters(), 60, message="the second call waiting")
    waiting.revoke(terminate=True, signal="SIGKILL")
    wait_for(lambda: not leases.waiters(), 60, message="its place in the queue given up")
    wait_for(
        lambda: (
            f"[{waiting.id}]: gave up the place in the queue of 'sleep:{key}'"
            in worker.log_tail(2000)
        ),
        60,
        message="the INFO line",
    )
    assert released(app, waiting.id) == []
    assert [h.owner.split(".")[0] for h in leases.holders()] == [first.id]
    first.revoke(terminate=True)
    third = sleeper.apply_async((key, 0.1), lock_policy="wait", lock_wait_timeout=120)
    third.get(timeout=60)


def test_wait_policy_times_out_with_lock_contended(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    sleeper = app.tasks["basic.sleeper"]
    first = sleeper.delay(key, 4)
    wait_until_running(app, "sleeper", key)
    second = sleeper.apply_async((key, 0.1), lock_policy="wait", lock_wait_timeout=0.5)
    result_of(app, second)
    assert isinstance(second.result, LockContended) and "(policy wait)" in str(second.result)
    first.get(timeout=60)


def test_a_per_call_wait_timeout_of_none_waits_for_ever(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    """``lock_wait_timeout=None`` per call means no limit (as on the class),
    not "the class's 0.5 s"; a send_task header of the wrong type is one
    precise error naming the header, and the body does not run."""
    first = app.tasks["basic.sleeper"].delay(key, 2)
    wait_until_running(app, "sleeper", key)
    impatient = app.tasks["basic.impatient"]
    timed_out = impatient.apply_async((key, 0.1))
    patient = impatient.apply_async((key, 0.1), lock_wait_timeout=None)
    bad = app.send_task("basic.impatient", (key, 0.1), headers={"redislock_wait_timeout": "abc"})
    result_of(app, timed_out)
    assert isinstance(timed_out.result, LockContended), timed_out.result
    assert patient.get(timeout=60) is not None
    first.get(timeout=60)
    result_of(app, bad)
    assert bad.state == "FAILURE" and "redislock_wait_timeout header" in str(bad.result)
    events = app.recorder.events("impatient", key)
    assert {e["id"] for e in events if e["what"] == "start"} == {patient.id}
    first_end = next(e["t"] for e in app.recorder.events("sleeper", key) if e["what"] == "end")
    assert next(e["t"] for e in events if e["what"] == "start") >= first_end


def test_retry_policy_requeues_without_consuming_max_retries(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    sleeper = app.tasks["basic.sleeper"]
    first = sleeper.delay(key, 1.5)
    wait_until_running(app, "sleeper", key)
    second = sleeper.apply_async((key, 0.1), lock_policy="retry")
    wait_for(lambda: second.state == "RETRY", 30, message="second requeued (RETRY)")
    second.get(timeout=60)
    [second_start] = [e for e in started(app, "sleeper", key) if e["id"] == second.id]
    assert second_start["retries"] == 0  # the task's own retry budget is untouched
    contended = signals_for(app, second.id, "redislock_contended")
    assert contended and {s["policy"] for s in contended} == {"retry"}
    first.get(timeout=60)


def test_retry_policy_budget_exhausted_fails(app: Any, worker: WorkerProcess, key: str) -> None:
    first = app.tasks["basic.sleeper"].delay(key, 5)
    wait_until_running(app, "sleeper", key)
    second = app.tasks["basic.limited_retry"].delay(key)
    result_of(app, second)
    assert isinstance(second.result, LockContended) and "(policy retry)" in str(second.result)
    assert "after 2 requeues" in str(second.result)
    assert len(signals_for(app, second.id, "redislock_contended")) == 3
    first.revoke(terminate=True)


def test_send_task_meets_the_run_time_lock(app: Any, worker: WorkerProcess, key: str) -> None:
    first = app.send_task("basic.sleeper", (key, 2))
    wait_until_running(app, "sleeper", key)
    second = app.send_task("basic.sleeper", (key, 0.1))
    wait_for(lambda: second.state == SKIPPED, 60, message="send_task duplicate SKIPPED")
    first.get(timeout=60)
    assert [e["id"] for e in started(app, "sleeper", key)] == [first.id]


def test_lease_lost_while_running_is_signalled_and_visible(
    app: Any, worker: WorkerProcess, key: str, redis_client: redis.Redis
) -> None:
    task = app.tasks["basic.watch_lost"]
    result = task.apply_async((key,), lock_ttl=4)  # margin: the deletion, not load, ends it
    wait_until_running(app, "watch_lost", key)
    name = task.redislock_name((key,), {})
    lease_set = task.redislock_leaseset(name)
    assert redis_client.delete(lease_set.keys.holders) == 1
    assert result.get(timeout=60) is False  # the body saw owned() turn False
    [lost] = wait_for(lambda: signals_for(app, result.id, "redislock_lost"), 10, message="lost")
    assert lost["name"] == name and "gone" in lost["reason"]
    [rel] = wait_for(lambda: released(app, result.id), 10, message="released")
    assert rel["held"] is False
    assert "lost before release" in Path(worker.log_path).read_text()


def test_a_lease_the_heartbeat_never_saw_lost_is_signalled_lost_at_release(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    """docs/lifecycle.md: a body that kept the heartbeat from running learns of
    the loss at its release: ``lock_lost`` once, reason ``gone at release``,
    before ``lock_released`` with ``held`` False."""
    task = app.tasks["basic.lose_own_lease"]
    result = task.apply_async((key,), lock_ttl=120)  # no beat within the body
    result.get(timeout=60)
    [rel] = wait_for(lambda: released(app, result.id), 10, message="released")
    assert rel["held"] is False
    [lost] = signals_for(app, result.id, "redislock_lost")
    assert lost["name"] == task.redislock_name((key,), {})
    assert "gone at release" in lost["reason"]
    lines = Path(worker.log_path).read_text().splitlines()
    assert any(result.id in line and "lost before release" in line for line in lines)


def test_child_sigkill_also_clears_the_enqueue_marker(
    app: Any, worker: WorkerProcess, key: str, config: dict[str, str], redis_client: redis.Redis
) -> None:
    task = app.tasks["basic.refresh_dedupe"]
    result = task.delay(key, 60)
    assert task.delay(key, 60).id == result.id  # de-duplicated while queued or running
    start = wait_until_running(app, "refresh_dedupe", key)
    marker = marker_key(config["prefix"], f"dedupe:{key}", task.name)
    assert redis_client.get(marker) == result.id.encode()
    os.kill(start["pid"], signal.SIGKILL)
    wait_for(lambda: not redis_client.exists(marker), 10, message="marker cleared")
    wait_for(lambda: not holders(app, "basic.refresh_dedupe", key), 10, message="release")
    assert task.delay(key, 0.01).id != result.id  # accepted again


def test_revoked_before_it_ran_clears_the_enqueue_marker(
    app: Any, worker: WorkerProcess, key: str, config: dict[str, str], redis_client: redis.Redis
) -> None:
    task = app.tasks["basic.refresh_dedupe"]
    result = task.apply_async((key, 0.01), countdown=2)
    marker = marker_key(config["prefix"], f"dedupe:{key}", task.name)
    assert redis_client.get(marker) == result.id.encode()
    assert 600 < redis_client.pttl(marker) / 1000 <= 602  # TTL covers the countdown
    result.revoke()
    wait_for(lambda: not redis_client.exists(marker), 30, message="marker cleared")
    wait_for(lambda: result.state == "REVOKED", 30, message="REVOKED")
    assert app.recorder.events("refresh_dedupe", key) == []


def test_a_revoked_call_still_waiting_keeps_its_marker_until_cleared_beside_the_revoke(
    app: Any, worker: WorkerProcess, key: str, config: dict[str, str], redis_client: redis.Redis
) -> None:
    """A revoke clears the marker when a worker discards the message (here at
    its countdown, 60 s away); until then a new call gets the revoked call's
    result, and ``redislock_clear_marker`` beside the revoke frees the key at
    once (only for the task id that holds it)."""
    task = app.tasks["basic.refresh_dedupe"]
    revoked = task.apply_async((key, 0.01), countdown=60)
    marker = marker_key(config["prefix"], f"dedupe:{key}", task.name)

    def held_by_the_worker() -> bool:  # else a revoke seen first discards it on receipt
        scheduled = app.control.inspect(timeout=2).scheduled() or {}
        return revoked.id in json.dumps(scheduled)

    wait_for(held_by_the_worker, 30, message="the worker holds the countdown message")
    revoked.revoke()
    assert task.delay(key, 0.01).id == revoked.id  # the marker waits for the worker
    assert not task.redislock_clear_marker("another-id", (key, 0.01), {})
    assert redis_client.get(marker) == revoked.id.encode()
    assert task.redislock_clear_marker(revoked.id, (key, 0.01), {})
    fresh = task.delay(key, 0.01)
    assert fresh.id != revoked.id
    fresh.get(timeout=60)
    assert [e["id"] for e in started(app, "refresh_dedupe", key)] == [fresh.id]


def test_semaphore_slot_of_a_killed_child_is_released_by_main_process(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    task = app.tasks["basic.sync_account"]
    results = [task.delay(key, n, 60) for n in range(2)]
    wait_for(lambda: len(started(app, "sync_account", key)) == 2, 60, message="both slots")
    lease_set = task.redislock_leaseset(task.redislock_name((key,), {}))
    assert len(lease_set.holders()) == 2
    victim = started(app, "sync_account", key)[0]
    os.kill(victim["pid"], signal.SIGKILL)
    wait_for(lambda: len(lease_set.holders()) == 1, 5, message="the dead child's slot freed")
    [survivor] = lease_set.holders()
    assert not survivor.owner.startswith(victim["id"] + ".")  # the other task kept its slot
    for result in results:
        if result.id != victim["id"]:
            result.revoke(terminate=True, signal="SIGKILL")
    wait_for(lambda: not lease_set.holders(), 10, message="all slots free")


def test_a_stopped_pool_child_is_shown_silent_while_the_main_process_renews_its_lease(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A pool child stopped (SIGSTOP) in its body keeps its lease: the worker's
    main process renews it.  Its statement expires a ttl later, and from then
    on ``status`` shows its ALIVE as ``>N ago`` (silent, in ``--json`` too)
    and the web view marks it suspect, instead of "-" as for a holder outside
    a worker."""
    from click.testing import CliRunner

    from celery_redislock.admin.cli import redislock
    from celery_redislock.admin.target import Target
    from celery_redislock.admin.web.state import overview

    config = {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", "ttl": "2"}
    app = create_app(config)
    base = ["--url", redis_url, "--prefix", config["prefix"]]
    target = Target(redis.Redis.from_url(redis_url), redis_url, config["prefix"])

    def status() -> dict[str, Any]:
        shown = CliRunner().invoke(redislock, ["status", "--json", *base])
        assert shown.exit_code == 0, shown.output
        body: dict[str, Any] = json.loads(shown.output)
        return body

    with worker_factory(tmp_path_factory.mktemp("stopped-child")) as start:
        start(config, pool="prefork", concurrency=1)
        run = app.tasks["basic.sleeper"].delay(key, 60)
        child = wait_until_running(app, "sleeper", key)["pid"]
        wait_for(lambda: status()["last_statement_ago"], 30, message="the child stated")
        assert not status()["silent"]
        os.kill(child, signal.SIGSTOP)
        try:
            silent = wait_for(lambda: status()["silent"], 60, message="the child shown silent")
            body = status()
            [lease_set] = body["lease_sets"]
            [holder] = lease_set["holders"]
            assert silent == [holder["owner"]] and holder["expires_in"] > 0  # still renewed
            text = CliRunner().invoke(redislock, ["status", *base]).output
            assert re.search(r" >[0-9.]+s ago ", text), text
            [shown] = [h for h in overview(target)["holders"] if h["name"] == f"sleep:{key}"]
            assert shown["suspect"] and shown["alive_silent"] and shown["alive_ago"] > 2
        finally:
            os.kill(child, signal.SIGCONT)
        run.revoke(terminate=True, signal="SIGKILL")
