"""Faults around rate limits (docs/rate.md), against real prefork workers and a real Redis.

* A pool child SIGKILLed inside ``self.redislock_pause(s)``, after the task
  went back to the head of its key's park and before its run released the
  lease (fault point ``after_pause_park`` of tests/celery_apps/basic.py):
  the task is not lost, runs again (same id) once the pause is over and its
  dead run is gone, before the key's later tasks, in FIFO order; its state
  stays PARKED meanwhile (the main process acknowledges the dead run as
  Celery does an ``Ignore``: no FAILURE, no requeue); and when the worker
  sees the lost child only once the task runs again (acks_late), the killed
  run's copy is still acknowledged, its promotion token having gone stale
  when the task went back to the park, and never runs beside the re-run.
* The sweeper does not spin on a name that is due now but cannot be promoted.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from celery.result import AsyncResult

from celery_redislock import PARKED, RateLimiter
from celery_redislock.core.keys import park_index
from celery_redislock.core.leaseset import LeaseSet
from celery_redislock.core.park import Parking, wake
from celery_redislock.settings import client_for
from celery_redislock.testing.servers import RedisServer
from tests.celery_apps.basic import create_app
from tests.celery_harness import WorkerProcess, worker_factory
from tests.waiting import wait_for

TASK = "basic.rated_backoff_gated"  # rate_key "rbackg:{key}", 20/s, policy park
SHORT = "rated_backoff_gated"


@pytest.fixture
def key() -> str:
    return f"r{uuid.uuid4().hex[:8]}"


def fresh(app: Any, task_id: str) -> AsyncResult:
    """A new AsyncResult: a ready one caches the first final state it read."""
    return AsyncResult(task_id, app=app)


def events(app: Any, key: str, what: str) -> list[dict[str, Any]]:
    return [e for e in app.recorder.events(SHORT, key) if e["what"] == what]


def signals_of(app: Any, name: str, task_id: str) -> list[dict[str, Any]]:
    return [
        s for s in app.recorder.signals() if s["signal"] == name and s.get("task_id") == task_id
    ]


def parking(app: Any, key: str) -> Parking:
    client, settings = client_for(app)
    return Parking(client, settings.prefix, f"rbackg:{key}")


def kill_in_pause(app: Any, key: str, pause: float) -> AsyncResult:
    """Send a task whose first run pauses its key for ``pause`` s and whose child
    is SIGKILLed right after that put it back at the head of the park; returns
    once the child is dead and the main process has released its lease."""
    prefix, client = app.conf.redislock_prefix, app.recorder.client
    client.set(f"{prefix}:backoff:{key}", 1)
    client.set(f"{prefix}:fault:after_pause_park", 1)
    first = app.tasks[TASK].delay(key, 0, pause)
    wait_for(
        lambda: not client.exists(f"{prefix}:fault:after_pause_park"),
        60,
        message="the child killed at the park-at-head",
    )
    (parked,) = signals_of(app, "redislock_parked", first.id)
    assert parked["where"] == "pause"
    # The worker's main process sees its child gone and releases the run's lease.
    released = wait_for(
        lambda: signals_of(app, "redislock_released", first.id),
        60,
        message="the dead run's lease released",
    )
    assert [(s["reason"], s["held"]) for s in released] == [("worker lost", True)]
    assert released[0]["pid"] != parked["pid"]
    assert app.tasks[TASK].redislock_leaseset(f"rbackg:{key}", limit=1).holders() == []
    return first


def celery_saw_the_lost_child(worker: WorkerProcess) -> bool:
    """The main process handled the lost job: ``LockRequest.on_failure`` found the
    task in its park (logged), or Celery's own handling (``WorkerLostError``)."""
    log = Path(worker.log_path).read_text(errors="replace")
    return "it runs from its park" in log or "WorkerLostError" in log


def resume(app: Any, key: str) -> None:
    """``celery redislock resume``: end the pause, and the sweepers promote now."""
    client, settings = client_for(app)
    RateLimiter(client, f"rbackg:{key}", prefix=settings.prefix).resume()
    wake(client, settings.prefix, f"rbackg:{key}")


def assert_ran_again_once(app: Any, key: str, first: str, later: list[str]) -> None:
    """The killed run (a start without an end), then one run of each task, the
    paused one first; none after its own end."""
    starts, ends = events(app, key, "start"), events(app, key, "end")
    assert [e["id"] for e in starts] == [first, first, *later]
    assert [e["id"] for e in ends] == [first, *later]
    assert [e["n"] for e in starts[1:]] == list(range(len(later) + 1))
    assert starts[0]["pid"] not in {e["pid"] for e in ends}  # the killed child ran no more


def test_a_child_killed_between_pause_park_and_release_runs_again_after_the_pause(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Default config (early ack): the killed run's message is gone; the park's
    entry is the task.  The main process releases the dead run's lease; once the
    pause is over the sweeper promotes the entry, the same id runs again first,
    then the key's later tasks in FIFO order; no start of the key falls in the
    pause; every result ends SUCCESS, also once the main process has handled
    the lost child."""
    pause = 3.0
    config = {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}"}
    app = create_app(config)
    task = app.tasks[TASK]
    with worker_factory(tmp_path_factory.mktemp("rate-pause-kill")) as start:
        worker = start(config, pool="prefork", concurrency=2)
        first = kill_in_pause(app, key, pause)
        later = [task.delay(key, n) for n in range(1, 4)]
        # Precondition: they were sent while the killed task waited at the head.
        assert [r.state for r in later] == [PARKED] * 3
        status = parking(app, key).status(10)
        assert [e["task_id"] for e in status.entries] == [first.id] + [r.id for r in later]
        assert status.paused_for > 0
        ids = [first.id] + [r.id for r in later]
        wait_for(
            lambda: all(fresh(app, i).state == "SUCCESS" for i in ids),
            120,
            message="every task SUCCESS",
        )
        wait_for(lambda: celery_saw_the_lost_child(worker), 120, message="Celery's WorkerLostError")
        assert [fresh(app, i).state for i in ids] == ["SUCCESS"] * 4
        assert [fresh(app, i).result for i in ids] == [0, 1, 2, 3]
    assert_ran_again_once(app, key, first.id, [r.id for r in later])
    paused_at = events(app, key, "paused")[0]["t"]  # before the pause began
    released_at = signals_of(app, "redislock_released", first.id)[0]["t"]  # child dead by then
    starts = events(app, key, "start")
    assert all(e["t"] >= paused_at + pause - 0.002 for e in starts[1:]), "a start in the pause"
    assert starts[1]["t"] > released_at
    status = parking(app, key).status()
    assert (status.parked, status.in_flight) == (0, 0)


def test_a_child_killed_between_pause_park_and_release_is_not_failure_while_parked(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Early acks (the default), a pause longer than the main process takes to
    report the dead child (a 429's Retry-After of a minute; here the pause is
    ended by ``resume`` once it has reported it, so the order is fixed): the
    task waits at the head of its park, so its state stays PARKED (Celery
    alone would store FAILURE with WorkerLostError, send ``task_failure`` and
    call errbacks for a task that is going to run: ``LockRequest.on_failure``
    finds it in its park and acknowledges it as an ``Ignore``); then it runs
    and ends SUCCESS."""
    config = {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", "lost_wait": "1"}
    app = create_app(config)
    with worker_factory(tmp_path_factory.mktemp("rate-pause-kill-state")) as start:
        worker = start(config, pool="prefork", concurrency=2)
        first = kill_in_pause(app, key, 600)
        wait_for(lambda: celery_saw_the_lost_child(worker), 120, message="Celery's WorkerLostError")
        seen = fresh(app, first.id)
        while_parked = (seen.state, repr(seen.result))
        status = parking(app, key).status(1)
        assert status.parked == 1 and status.entries[0]["task_id"] == first.id
        assert status.paused_for > 500  # still parked, at the head, in its pause
        resume(app, key)
        wait_for(lambda: fresh(app, first.id).state == "SUCCESS", 120, message="SUCCESS")
    assert fresh(app, first.id).result == 0
    assert_ran_again_once(app, key, first.id, [])
    assert while_parked[0] == PARKED, f"parked at the head of its park, but shown {while_parked}"


def test_acks_late_a_child_killed_between_pause_park_and_release_runs_again_once(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """acks_late + reject_on_worker_lost: the main process finds the task in its
    park and acknowledges the killed run's message instead of requeueing it,
    without a FAILURE; after the pause the task runs once more and nothing
    else of it is left in the broker."""
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "acks_late": "1",
        "lost_wait": "1",
    }
    app = create_app(config)
    client = app.recorder.client
    with worker_factory(tmp_path_factory.mktemp("rate-pause-kill-late")) as start:
        worker = start(config, pool="prefork", concurrency=2)
        first = kill_in_pause(app, key, 600)
        wait_for(lambda: celery_saw_the_lost_child(worker), 120, message="the lost child handled")
        assert "it runs from its park" in Path(worker.log_path).read_text(errors="replace")
        assert fresh(app, first.id).state == PARKED
        assert client.llen(f"q-{config['prefix']}") == 0  # acknowledged, not requeued
        status = parking(app, key).status(1)
        assert status.parked == 1 and status.entries[0]["task_id"] == first.id
        resume(app, key)
        wait_for(lambda: fresh(app, first.id).state == "SUCCESS", 120, message="SUCCESS")
        assert fresh(app, first.id).result == 0
        assert client.llen(f"q-{config['prefix']}") == 0
    assert_ran_again_once(app, key, first.id, [])


def max_overlap_of(events: list[dict[str, Any]]) -> int:
    running = most = 0
    for event in sorted(events, key=lambda e: e["t"]):
        running += 1 if event["what"] == "start" else -1
        most = max(most, running)
    return most


def test_acks_late_a_copy_requeued_late_does_not_run_alongside_the_rerun(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """acks_late + reject_on_worker_lost.  The child is killed after its
    park-at-head, and its worker sees the lost child only once the parked
    task already runs again (here the first worker's main process is stopped
    meanwhile, so the order is fixed; in life: Celery reporting the lost child
    later than a short pause ends).  The task is no longer in the park then,
    but the killed run's copy carries a promotion token that went stale when
    the task went back to the park: the main process acknowledges it (no
    FAILURE, nothing requeued), or a copy that comes back anyway is dropped
    as stale; it never runs beside the re-run (the rate key has no cap:
    nothing else would keep it out)."""
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    config = {"redis": redis_url, "prefix": prefix, "acks_late": "1"}
    app = create_app(config)
    client = app.recorder.client
    with worker_factory(tmp_path_factory.mktemp("rate-pause-kill-requeue")) as start:
        first_worker = start(config, pool="prefork", concurrency=1)
        client.set(f"{prefix}:backoff:{key}", 1)
        client.set(f"{prefix}:fault:after_pause_park", 1)
        first = app.tasks[TASK].delay(key, 0, 600, 120)  # the re-run waits at the gate
        wait_for(lambda: events(app, key, "start"), 60, message="the first run")
        os.kill(first_worker.pid, signal.SIGSTOP)  # its child runs on; nobody sees it die
        try:
            client.set(f"{prefix}:pregate:{key}", 1)
            wait_for(
                lambda: not client.exists(f"{prefix}:fault:after_pause_park"),
                60,
                message="the child killed at the park-at-head",
            )
            second_worker = start(config, pool="prefork", concurrency=2)
            resume(app, key)
            wait_for(lambda: len(events(app, key, "start")) == 2, 60, message="the re-run")
        finally:
            os.kill(first_worker.pid, signal.SIGCONT)

        def met_itself() -> list[dict[str, Any]]:
            return [
                s
                for s in signals_of(app, "redislock_contended", first.id)
                if s["policy"] == "redelivered"
            ]

        def dropped() -> bool:
            logs = (
                Path(w.log_path).read_text(errors="replace") for w in (first_worker, second_worker)
            )
            return any(f"[{first.id}] dropped: a stale copy" in text for text in logs)

        def acknowledged() -> bool:
            log = Path(first_worker.log_path).read_text(errors="replace")
            return f"[{first.id}]: its process died after the task was parked" in log

        wait_for(
            lambda: (
                acknowledged() or dropped() or met_itself() or len(events(app, key, "start")) == 3
            ),
            120,
            message="the lost child's copy acknowledged, or requeued and arrived",
        )
        assert (acknowledged() or dropped()) and not met_itself(), "the copy was not given up"
        client.set(f"{prefix}:gate:{key}", 1)
        wait_for(lambda: fresh(app, first.id).state == "SUCCESS", 120, message="SUCCESS")
        wait_for(
            lambda: len(events(app, key, "end")) == len(events(app, key, "start")) - 1,
            120,
            message="every run but the killed one ended",
        )
    runs = app.recorder.events(SHORT, key)
    killed = runs[0]["pid"]
    assert [e["what"] for e in runs[:2]] == ["start", "paused"]
    overlap = max_overlap_of([e for e in runs[2:] if e["pid"] != killed])
    starts = [(e["pid"], round(e["t"] - runs[0]["t"], 3)) for e in runs if e["what"] == "start"]
    assert overlap <= 1 and len(starts) == 2, f"{overlap} runs of {first.id} at once; {starts}"


# -- the sweeper -----------------------------------------------------------

SWEEP = 0.5  # redislock_park_sweep_interval of the sweeper test's worker


def redis_ms(client: Any) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def script_calls(client: Any) -> int:
    """Lua script calls the server has run (every sweeper call is one; the
    commands a script runs inside are counted apart, as their own commands)."""
    stats = client.info("commandstats")
    return sum(
        int(stats.get(c, {}).get("calls", 0))
        for c in ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval")
    )


def test_the_sweeper_does_not_spin_on_a_name_due_now_that_it_cannot_promote(
    redis_url: str, own_redis: RedisServer, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A name whose head waits for a holder of a lower limit is due *now* in the
    index after every promotion that publishes nothing (includes/park_keys.lua,
    next_due() counts holders against the stored limit).  The sweeper looks at
    it again only after an interval (Sweeper._next_wait): an idle worker's lock
    Redis (a private one, so only the worker and this test talk to it) runs a
    few commands per interval, not thousands a second.  Once the holder goes,
    the sweeper promotes the head: it was sweeping that name all along."""
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "lock_redis": own_redis.url,
        "park_sweep": str(SWEEP),
    }
    app = create_app(config)
    lock_client, settings = client_for(app)
    name, index = f"park:{key}", park_index(settings.prefix)
    with worker_factory(tmp_path_factory.mktemp("sweep-spin")) as start:
        start(config, pool="prefork", concurrency=1)
        # A holder of limit 1 (a lock on the key) and a task of limit 5 behind it:
        # 1 holder < 5 looks like a free slot, but no one may join a limit-1 holder.
        blocker = LeaseSet(lock_client, name, 1, ttl=600, prefix=settings.prefix)
        assert blocker.acquire(blocking=False)
        parked = app.tasks["basic.parked_wide"].delay(key, 0, 0.0)
        assert parked.state == PARKED
        enqueued_score = lock_client.zscore(index, name)
        wait_for(
            lambda: lock_client.zscore(index, name) != enqueued_score,
            60,
            message="a first sweep of the name",
        )
        before, began = script_calls(lock_client), time.monotonic()
        first_score = lock_client.zscore(index, name)
        while True:  # the measurement window: at least 8 intervals, and a sweep in it
            time.sleep(SWEEP / 2)
            score = lock_client.zscore(index, name)
            if time.monotonic() - began >= 8 * SWEEP and score != first_score:
                break
        calls, elapsed = script_calls(lock_client) - before, time.monotonic() - began
        # A sweep is 4 calls (park_due, park_promote, park_due for the next time,
        # the dead-process check); a sweeper that spins makes thousands a second.
        intervals = elapsed / SWEEP + 1
        assert calls <= 6 * intervals + 10, f"{calls} script calls in {elapsed:.2f} s"
        # Still stuck: parked, and due now again after each sweep.
        assert Parking(lock_client, settings.prefix, name).status().parked == 1
        wait_for(
            lambda: lock_client.zscore(index, name) <= redis_ms(lock_client),
            60,
            message="the name due now",
        )
        blocker.release()  # a plain release: it promotes nothing, the sweeper does
        wait_for(lambda: fresh(app, parked.id).state == "SUCCESS", 60, message="promoted")
