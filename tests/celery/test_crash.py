"""Worker-level events, each with a worker of its own: the whole worker
killed, warm shutdown, redelivery of the same task id, Redis for locks
unreachable, locks in a different Redis than the broker, RabbitMQ as broker.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from celery_redislock.testing.servers import RedisServer, free_port
from tests import kombu_restore
from tests.celery_apps.basic import create_app
from tests.celery_harness import WorkerProcess, worker_factory
from tests.conftest import keys_with_prefix
from tests.waiting import wait_for

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"


@pytest.fixture
def start_worker(tmp_path: Any) -> Iterator[Any]:  # same as celery_worker_factory
    with worker_factory(tmp_path) as start:
        yield start


def make_config(redis_url: str, **extra: str) -> dict[str, str]:
    return {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", **extra}


def holders(app: Any, task_name: str, *args: Any) -> list[Any]:
    task = app.tasks[task_name]
    return task.redislock_leaseset(task.redislock_name(args, {})).holders()


def starts(app: Any, task: str, key: object) -> list[dict[str, Any]]:
    return [e for e in app.recorder.events(task, key) if e["what"] == "start"]


def test_whole_worker_killed_frees_within_the_ttl(redis_url: str, start_worker: Any) -> None:
    config = make_config(redis_url, ttl="3")
    app = create_app(config)
    worker: WorkerProcess = start_worker(config, concurrency=2)
    app.tasks["basic.sleeper"].delay("k", 120)
    wait_for(lambda: starts(app, "sleeper", "k"), 60, message="task to start")
    worker.kill()  # main process and children: nobody is left to release
    killed_at = time.monotonic()
    assert holders(app, "basic.sleeper", "k")  # still held: only the TTL can free it now
    # Wait long enough to see a lease that outlives its TTL (e.g. renewed by a
    # process the kill missed), then check it went within TTL + margin.
    wait_for(lambda: not holders(app, "basic.sleeper", "k"), 60, message="TTL expiry")
    freed_after = time.monotonic() - killed_at
    assert freed_after <= 3 + 5, f"held {freed_after:.1f} s after the kill, TTL 3 s"


def test_warm_shutdown_lets_running_tasks_finish_and_release(
    redis_url: str, start_worker: Any, redis_client: redis.Redis
) -> None:
    config = make_config(redis_url)
    app = create_app(config)
    worker: WorkerProcess = start_worker(config, concurrency=2)
    results = [app.tasks["basic.sleeper"].delay(key, 1.5) for key in ("a", "b")]
    for key in ("a", "b"):
        wait_for(lambda key=key: starts(app, "sleeper", key), 60, message=f"{key} to start")
    assert worker.stop() == 0  # SIGTERM: warm shutdown waits for running tasks
    for result in results:
        assert result.get(timeout=10)["name"].startswith("sleep:")
    for key in ("a", "b"):
        assert [e["what"] for e in app.recorder.events("sleeper", key)] == ["start", "end"]
        assert holders(app, "basic.sleeper", key) == []
    # Nothing held or queued is left: only fencing counters and test records.
    left = keys_with_prefix(redis_client, config["prefix"])
    assert [k for k in left if not k.endswith(":fence") and ":rec:" not in k] == [
        f"{config['prefix']}:signals"
    ]


def redis_restore_wait() -> tuple[float, str]:
    """How long until kombu's Redis transport hands out an unacked message again
    (past its ``visibility_timeout``), and why: the wait and failure message."""
    return 60 + kombu_restore.restore_cadence(), (
        f"the redelivered copy to meet its own lease ({kombu_restore.why()})"
    )


def test_redelivery_of_the_same_task_id_neither_overlaps_nor_deadlocks(
    redis_url: str, start_worker: Any, redis_client: redis.Redis
) -> None:
    # acks_late and a 4 s visibility timeout: the broker hands the message out
    # again while the first execution (gated, so as long as we like) still runs.
    config = make_config(redis_url, acks_late="1", visibility="4")
    app = create_app(config)
    worker: WorkerProcess = start_worker(config, concurrency=3)
    result = app.tasks["basic.refresh_cache"].delay("r", 120, True)
    wait_for(lambda: starts(app, "refresh_cache", "r"), 60, message="first run")

    def redelivery_met_itself() -> bool:
        return any(
            s["signal"] == "redislock_contended"
            and s["task_id"] == result.id
            and s["policy"] == "redelivered"
            for s in app.recorder.signals()
        )

    restore_timeout, waited_for = redis_restore_wait()
    wait_for(redelivery_met_itself, restore_timeout, message=waited_for)
    assert len(starts(app, "refresh_cache", "r")) == 1  # it did not run alongside
    redis_client.set(f"{config['prefix']}:gate:r", 1, ex=600)
    assert result.get(timeout=60)["name"] == "cache:r"
    # The copy that made way comes back, finds the run ended (SUCCESS in the
    # result backend) and is dropped: it neither runs again nor leaves a copy
    # of its own to run after it (each run longer than the visibility timeout
    # did, for ever).
    wait_for(
        lambda: (
            f"[{result.id}] dropped: a copy of a delivery that ran to its end"
            in worker.log_path.read_text()
        ),
        60,
        message="the copy dropped",
    )
    wait_for(lambda: not holders(app, "basic.refresh_cache", "r"), 60, message="release")
    events = app.recorder.events("refresh_cache", "r")
    assert [e["id"] for e in events if e["what"] == "start"] == [result.id]  # once


def test_a_redelivered_copy_never_waits_behind_its_own_waiting_delivery(
    redis_url: str, start_worker: Any, redis_client: redis.Redis
) -> None:
    """Policy ``wait``: the redelivered copy of a delivery that still waits in
    the key's queue makes way for it (it used to queue behind it, holding a
    worker process, and run the task a second time after it); once that
    delivery ran, the copy is dropped."""
    config = make_config(redis_url, acks_late="1", visibility="4")
    app = create_app(config)
    worker: WorkerProcess = start_worker(config, concurrency=3)
    task = app.tasks["basic.patient"]
    holder = task.delay("w", True)
    wait_for(lambda: starts(app, "patient", "w"), 60, message="the holder's run")
    waiting = task.delay("w")
    leases = task.redislock_leaseset(task.redislock_name(("w",), {}))
    wait_for(lambda: leases.waiters(), 60, message="the second call waiting")

    def made_way(task_id: str) -> bool:
        return any(
            s["signal"] == "redislock_contended"
            and s["task_id"] == task_id
            and s["policy"] == "redelivered"
            for s in app.recorder.signals()
        )

    restore_timeout, waited_for = redis_restore_wait()
    wait_for(lambda: made_way(waiting.id), restore_timeout, message=waited_for)
    assert len(leases.waiters()) == 1  # the copy did not queue behind it
    redis_client.set(f"{config['prefix']}:gate:w", 1, ex=600)
    holder.get(timeout=60)
    waiting.get(timeout=60)
    wait_for(
        lambda: (
            f"[{waiting.id}] dropped: a copy of a delivery that ran" in worker.log_path.read_text()
        ),
        60,
        message="the waiting call's copy dropped",
    )
    started = [e["id"] for e in starts(app, "patient", "w")]
    assert sorted(started) == sorted([holder.id, waiting.id]), (holder.id, waiting.id, started)


def test_a_redelivered_copy_never_runs_beside_its_first_run_on_a_free_slot(
    redis_url: str, start_worker: Any, redis_client: redis.Redis
) -> None:
    """A semaphore (limit 2) has a free slot, so only the task id keeps the
    redelivered copy out: it requeues itself while its first run holds a slot,
    and its requeued message (which carries no redelivered mark) must look
    again, not take the free slot beside the first run."""
    config = make_config(redis_url, acks_late="1", visibility="4")
    app = create_app(config)
    start_worker(config, concurrency=3)
    result = app.tasks["basic.parked"].delay("sem", 0, 120, True)
    wait_for(lambda: starts(app, "parked", "sem"), 60, message="first run")

    def deferrals() -> int:
        return sum(
            s["signal"] == "redislock_contended"
            and s["task_id"] == result.id
            and s["policy"] == "redelivered"
            for s in app.recorder.signals()
        )

    restore_timeout, waited_for = redis_restore_wait()
    wait_for(
        lambda: deferrals() >= 2,
        restore_timeout + 30,
        message="the requeued copy looking again: " + waited_for,
    )
    assert len(starts(app, "parked", "sem")) == 1  # it did not run alongside
    redis_client.set(f"{config['prefix']}:gate:sem", 1, ex=600)
    assert result.get(timeout=60)["name"] == "park:sem"
    wait_for(lambda: not holders(app, "basic.parked", "sem"), 60, message="release")
    running = 0
    for event in sorted(app.recorder.events("parked", "sem"), key=lambda e: e["t"]):
        running += 1 if event["what"] == "start" else -1
        assert running <= 1


def test_redis_for_locks_unreachable_fails_closed(redis_url: str, start_worker: Any) -> None:
    config = make_config(redis_url, lock_redis=f"redis://127.0.0.1:{free_port()}/0")
    app = create_app(config)
    worker: WorkerProcess = start_worker(config, concurrency=1)
    result = app.send_task("basic.sleeper", ("x", 0.1))
    wait_for(lambda: result.state == "FAILURE", 60, message="FAILURE")
    assert type(result.result).__name__ == "ConnectionError", repr(result.result)
    assert starts(app, "sleeper", "x") == []  # the body never ran unlocked
    assert "unreachable (fail closed)" in worker.log_path.read_text()


def test_locks_in_another_redis_than_the_broker(redis_url: str, start_worker: Any) -> None:
    with RedisServer() as locks:
        config = make_config(redis_url, lock_redis=locks.url)
        app = create_app(config)
        start_worker(config, concurrency=2)
        first = app.tasks["basic.sleeper"].delay("x", 1.5)
        wait_for(lambda: starts(app, "sleeper", "x"), 60, message="first run")
        lock_client = redis.Redis.from_url(locks.url)
        assert keys_with_prefix(lock_client, config["prefix"])  # the lease lives there
        second = app.tasks["basic.sleeper"].delay("x", 0.1)
        wait_for(lambda: second.state == "SKIPPED", 60, message="SKIPPED")
        first.get(timeout=60)
        assert holders(app, "basic.sleeper", "x") == []


def rabbitmq_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=1):
            return True
    except OSError:
        return False


def test_rabbitmq_as_broker(redis_url: str, start_worker: Any) -> None:
    if not rabbitmq_reachable():
        message = f"RabbitMQ not reachable at {RABBITMQ_URL}: the AMQP broker test needs it"
        if os.environ.get("REDISLOCK_REQUIRE_RABBITMQ"):  # CI, where RabbitMQ listens
            pytest.fail(message + " (REDISLOCK_REQUIRE_RABBITMQ is set)")
        pytest.skip(message + " (apt-get install rabbitmq-server)")
    config = make_config(redis_url, broker=RABBITMQ_URL)
    app = create_app(config)
    start_worker(config, concurrency=2)
    first = app.tasks["basic.sleeper"].delay("x", 1.5)
    wait_for(lambda: starts(app, "sleeper", "x"), 60, message="first run")
    second = app.tasks["basic.sleeper"].delay("x", 0.1)
    wait_for(lambda: second.state == "SKIPPED", 60, message="SKIPPED")
    third = app.tasks["basic.sleeper"].apply_async(("x", 0.1), lock_policy="retry")
    first.get(timeout=60)
    third.get(timeout=60)
    assert [e["id"] for e in starts(app, "sleeper", "x")] == [first.id, third.id]
    assert holders(app, "basic.sleeper", "x") == []


@pytest.mark.parametrize(("pool", "concurrency"), [("solo", 1), ("threads", 4)])
def test_other_pools(redis_url: str, start_worker: Any, pool: str, concurrency: int) -> None:
    config = make_config(redis_url)
    app = create_app(config)
    start_worker(config, pool=pool, concurrency=concurrency)
    sleeper = app.tasks["basic.sleeper"]
    assert sleeper.delay("s", 0.05).get(timeout=60)["name"] == "sleep:s"
    assert app.tasks["basic.retrying"].delay("s", 1).get(timeout=60) == 1
    assert app.tasks["basic.watch_lost"].apply_async(("s", 0.1), lock_ttl=5).get(timeout=60)
    assert holders(app, "basic.sleeper", "s") == []
    assert holders(app, "basic.retrying", "s") == []


@pytest.mark.parametrize(("pool", "concurrency"), [("solo", 1), ("threads", 4)])
def test_supersede_and_a_revoke_of_a_parked_task_on_other_pools(
    redis_url: str, start_worker: Any, pool: str, concurrency: int
) -> None:
    """``revoke(terminate=True)`` depends on the pool (threads cannot
    terminate, Celery #10490; solo cannot discard a revoked task, #6938).
    Neither is needed here: a superseded run stops at its checkpoint, and a
    parked task revoked by id is dropped when its promotion meets it."""
    from celery.states import REVOKED

    from celery_redislock import SUPERSEDED
    from celery_redislock import parking as park

    config = make_config(redis_url, park_sweep="0.5")
    app = create_app(config)
    start_worker(config, pool=pool, concurrency=concurrency)
    key = uuid.uuid4().hex[:8]
    superseding = app.tasks["basic.superseding"]
    first = superseding.delay(key, 1, True, 30)
    wait_for(
        lambda: any(e["what"] == "write" for e in app.recorder.events("superseding", key)),
        60,
        message="the first run's first write",
    )
    newer = superseding.delay(key, 2, True, 0.2)
    assert newer.get(timeout=60) == 2
    wait_for(lambda: first.state == SUPERSEDED, 30, message="the first run SUPERSEDED")
    assert first.info["superseded_by"] == newer.id

    parked = app.tasks["basic.parked"]  # limit 2
    gated = parked.delay(key, 0, 120, True)
    wait_for(lambda: starts(app, "parked", key), 60, message="the gated run")
    second = parked.delay(key, 1, 120, True)  # the second slot, until the gate opens
    victim = parked.delay(key, 2, 0.05)  # parked: both slots taken
    last = parked.delay(key, 3, 0.05)
    assert victim.state == park.PARKED
    park.revoke(app, victim.id)  # no name: dropped when its promotion meets it
    app.recorder.client.set(f"{config['prefix']}:gate:{key}", 1, ex=600)
    for result in (gated, second, last):
        result.get(timeout=60)
    wait_for(lambda: victim.state == REVOKED, 30, message="the revoked task REVOKED")
    assert victim.id not in {e["id"] for e in starts(app, "parked", key)}
    assert holders(app, "basic.parked", key) == []


def test_lease_lost_when_the_lock_redis_restarts(redis_url: str, start_worker: Any) -> None:
    with RedisServer() as locks:
        config = make_config(redis_url, lock_redis=locks.url)
        app = create_app(config)
        start_worker(config, concurrency=2)
        result = app.tasks["basic.watch_lost"].apply_async(("x", 60), lock_ttl=4)
        wait_for(lambda: starts(app, "watch_lost", "x"), 60, message="task to start")
        locks.restart()  # no persistence: every lease is gone
        assert result.get(timeout=60) is False  # the body saw owned() turn False
        lost = wait_for(
            lambda: [
                s
                for s in app.recorder.signals()
                if s["signal"] == "redislock_lost" and s["task_id"] == result.id
            ],
            10,
            message="lock_lost",
        )
        assert len(lost) == 1
        # The name is free again for others.
        assert app.tasks["basic.sleeper"].delay("x", 0.01).get(timeout=60)["name"] == "sleep:x"


def test_a_lock_redis_that_stays_down_is_one_renewal_warning_not_a_flood(
    redis_url: str, start_worker: Any
) -> None:
    """The main process retries a failing renewal every 0.1 s: while the lock
    Redis stays down it says so in one WARNING per name (per 30 s), not one
    per retry; the run itself sees its lease lost as before."""
    with RedisServer() as locks:
        config = make_config(redis_url, lock_redis=locks.url)
        app = create_app(config)
        worker = start_worker(config, concurrency=2)
        result = app.tasks["basic.watch_lost"].apply_async(("x", 60), lock_ttl=3)
        wait_for(lambda: starts(app, "watch_lost", "x"), 60, message="task to start")
        locks.kill()
        try:
            assert result.get(timeout=60) is False  # the body saw owned() turn False
            log = worker.log_path.read_text()
            assert log.count("main process: could not renew the leases") == 1, log[-3000:]
        finally:
            locks.restart()
