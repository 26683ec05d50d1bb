"""Policy ``park`` against real prefork workers and a real Redis (docs/park.md).

Each test uses its own lock name (key) on a module-scoped worker; the task
``basic.parked`` has limit 2 and records start/end events from its body, so
"exactly once", "never more than the limit" and FIFO order come from the
bodies themselves.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import chain, chord, group
from celery.result import AsyncResult

from celery_redislock import parking as park
from celery_redislock.core.capacity import Capacity
from celery_redislock.core.keys import park_index, park_total, revoke_record
from celery_redislock.core.park import Parking
from celery_redislock.parking.message import REQUEST_CONTENT_TYPE, republish
from celery_redislock.parking.promotion import promote
from celery_redislock.settings import client_for, park_settings
from celery_redislock.testing.servers import RedisServer
from tests import kombu_restore
from tests.celery.test_scenarios import max_overlap
from tests.celery_apps.basic import create_app
from tests.celery_harness import worker_factory
from tests.waiting import wait_for

LIMIT = 2


@pytest.fixture(scope="module")
def config(redis_url: str) -> dict[str, str]:
    return {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
        "park_deadline": "4",
        # No sweeps in this worker: whatever runs here was promoted by a
        # release.  The crash tests start workers of their own that sweep.
        "park_sweep": "3600",
    }


@pytest.fixture(scope="module")
def app(config: dict[str, str]) -> Any:
    return create_app(config)


@pytest.fixture(scope="module")
def worker(config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with worker_factory(tmp_path_factory.mktemp("park")) as start:
        yield start(config, pool="prefork", concurrency=4)


@pytest.fixture
def key() -> str:
    return f"k{uuid.uuid4().hex[:8]}"


def open_gate(app: Any, key: str) -> None:
    app.recorder.client.set(f"{app.conf.redislock_prefix}:gate:{key}", 1, ex=600)


def events(app: Any, key: str, what: str | None = None) -> list[dict[str, Any]]:
    return [e for e in app.recorder.events("parked", key) if what is None or e["what"] == what]


def parking(app: Any, key: str) -> Parking:
    client, settings = client_for(app)
    return Parking(client, settings.prefix, f"park:{key}")


def holders(app: Any, key: str) -> list[str]:
    client, settings = client_for(app)
    raw = client.zrange(f"{settings.prefix}:{{park:{key}}}:holders", 0, -1)
    return [r.decode() for r in raw]


def queue_length(app: Any) -> int:
    """Messages waiting in the worker's Redis broker queue."""
    return int(app.recorder.client.llen(f"q-{app.conf.redislock_prefix}"))


def fill_the_name(app: Any, key: str, first: int = 0) -> list[Any]:
    """``LIMIT`` gated ``basic.parked`` tasks running on ``key`` (until open_gate)."""
    task = app.tasks["basic.parked"]
    started = len(events(app, key, "start")) + LIMIT  # counted before any can start
    running = [task.delay(key, n, 120, True) for n in range(first, first + LIMIT)]
    wait_for(lambda: len(events(app, key, "start")) == started, 60, message=f"{LIMIT} running")
    return running


def let_redis_time_pass(app: Any, seconds: int, why: str) -> None:
    """Wait until Redis TIME (what expiries are judged by) has moved ``seconds`` on."""
    client, _ = client_for(app)
    start = client.time()[0]
    wait_for(lambda: client.time()[0] >= start + seconds, seconds + 10, message=why)


def assert_all_ran_once(app: Any, key: str, ids: list[str]) -> None:
    started = [e["id"] for e in events(app, key, "start")]
    assert sorted(started) == sorted(ids), "every task ran exactly once"
    assert max_overlap(events(app, key)) <= LIMIT


def assert_nothing_left(app: Any, key: str) -> None:
    status = parking(app, key).status()
    assert (status.parked, status.in_flight) == (0, 0)
    wait_for(lambda: holders(app, key) == [], 30, message="no slot left held")
    # An idle name leaves only its fence and the fates of its recent
    # promotion tokens behind, and no entry in the index.
    client, settings = client_for(app)
    left = {k.decode() for k in client.scan_iter(match=f"{settings.prefix}:{{park:{key}}}*")}
    base = f"{settings.prefix}:{{park:{key}}}"
    assert left <= {f"{base}:fence", f"{base}:tokens"}, left
    assert client.zscore(park_index(settings.prefix), f"park:{key}") is None


def sweeping_config(redis_url: str, **extra: str) -> dict[str, str]:
    """A fresh prefix, a 30 s lease TTL, a 4 s reservation deadline and a sweep
    every 0.5 s (for the crash tests' own workers), plus ``extra``."""
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
        "park_deadline": "4",
        "park_sweep": "0.5",
    }
    return {**config, **extra}


def test_enqueue_parks_and_release_promotes_in_order(app: Any, worker: Any, key: str) -> None:
    task = app.tasks["basic.parked"]
    results = [task.delay(key, n, 120, True) for n in range(8)]
    wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
    status = parking(app, key).status()
    assert status.parked == 6
    assert status.oldest_age is not None and status.oldest_age >= 0
    # The broker held only the two published ones, never the parked six.
    assert queue_length(app) == 0
    assert [r.state for r in results[LIMIT:]] == [park.PARKED] * 6
    open_gate(app, key)
    for r in results:
        r.get(timeout=120)
    assert_all_ran_once(app, key, [r.id for r in results])
    # Promoted in FIFO order: promotion tokens increase with the enqueue order
    # (start order also depends on how fast each re-publish reaches a child).
    tokens = {e["n"]: int(e["ptoken"]) for e in events(app, key, "start")}
    assert sorted(tokens) == list(range(8))
    assert [tokens[n] for n in range(8)] == sorted(tokens.values())
    assert_nothing_left(app, key)
    signals = [s for s in app.recorder.signals() if s["signal"] == "redislock_parked"]
    assert {s["task_id"] for s in signals if s["name"] == f"park:{key}"} == {
        r.id for r in results[LIMIT:]
    }


def test_a_stampede_racing_the_releases_loses_no_wake_up(app: Any, worker: Any, key: str) -> None:
    """Solid Queue #689, RQ #739: when "decide to park" and "release and
    promote" are separate steps, a call that parks just as the last holder
    releases waits for ever.  Here nothing sweeps (``park_sweep`` 3600 s), so
    a task that runs was promoted by a release: four threads call short
    tasks of one key while earlier ones end, and every call must run once."""
    import threading

    task = app.tasks["basic.parked"]
    results: list[Any] = []
    errors: list[BaseException] = []

    def call(offset: int) -> None:
        try:
            for n in range(offset, offset + 40):
                results.append(task.delay(key, n, 0.01))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(40 * i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == [] and len(results) == 160
    for result in results:
        result.get(timeout=120)  # a lost wake-up leaves one parked: this times out
    assert_all_ran_once(app, key, [r.id for r in results])
    assert_nothing_left(app, key)


def test_send_task_is_parked_at_run_time(app: Any, worker: Any, key: str) -> None:
    # send_task bypasses apply_async: the worker admits or parks it.
    ids = [app.send_task("basic.parked", args=(key, n, 120, True)).id for n in range(5)]
    wait_for(lambda: parking(app, key).status().parked == 3, 60, message="three parked")
    assert len(events(app, key, "start")) == LIMIT
    wait_for(lambda: AsyncResult(ids[-1], app=app).state == park.PARKED, 30, message="PARKED")
    open_gate(app, key)
    for task_id in ids:
        AsyncResult(task_id, app=app).get(timeout=120)
    assert_all_ran_once(app, key, ids)
    assert_nothing_left(app, key)


def test_copy_with_stale_token_is_dropped(app: Any, worker: Any, key: str) -> None:
    task = app.tasks["basic.parked"]
    results = [task.delay(key, n, 120, True) for n in range(3)]
    wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
    entry = parking(app, key).status(count=1).entries[0]
    client, settings = client_for(app)
    raw = client.hget(f"{settings.prefix}:{{park:{key}}}:msgs", entry["task_id"]).decode()
    envelope = json.loads(raw)
    # Two copies with tokens that match no reservation, while their task is
    # parked: acked and dropped.  (Judged after the task ran, a token Redis
    # never issued reads as lost data and the copy is admitted: at least once.)
    republish(app, envelope, 12345)
    republish(app, envelope, 0)
    wait_for(
        lambda: (
            worker.log_path.read_text(errors="replace").count(f"[{entry['task_id']}] dropped") == 2
        ),
        60,
        message="both copies judged and dropped",
    )
    assert queue_length(app) == 0
    open_gate(app, key)
    for r in results:
        r.get(timeout=120)
    assert_all_ran_once(app, key, [r.id for r in results])
    assert_nothing_left(app, key)


def test_parking_is_idempotent_on_task_id(app: Any, worker: Any, key: str) -> None:
    running = fill_the_name(app, key)
    task_id = f"dup-{uuid.uuid4().hex}"
    for _ in range(3):
        app.send_task("basic.parked", args=(key, 9, 0.1), task_id=task_id)
    # Every copy must have been judged before a slot frees: a copy that reaches
    # a worker after its twin was promoted and claimed is admitted again (at
    # least once, as Celery delivers; docs/park.md).
    wait_for(
        lambda: worker.log_path.read_text(errors="replace").count(f"[{task_id}] dropped") == 2,
        60,
        message="two copies dropped",
    )
    assert parking(app, key).status().parked == 1
    assert queue_length(app) == 0
    open_gate(app, key)
    AsyncResult(task_id, app=app).get(timeout=120)
    for r in running:
        r.get(timeout=120)
    assert_all_ran_once(app, key, [r.id for r in running] + [task_id])
    assert_nothing_left(app, key)


def test_chains_groups_and_chords_with_parked_members_complete(
    app: Any, worker: Any, key: str
) -> None:
    task = app.tasks["basic.parked"]
    running = fill_the_name(app, key)
    in_chain = chain(task.si(key, 10, 0.05), task.si(key, 11, 0.05), task.si(key, 12, 0.05))
    in_group = group(task.si(key, 20 + i, 0.05) for i in range(3))
    in_chord = chord([task.si(key, 30 + i, 0.05) for i in range(3)], app.tasks["basic.collect"].s())
    chained, grouped, chorded = (c.apply_async() for c in (in_chain, in_group, in_chord))
    # The chain's first member, the group and the chord header: all parked.
    wait_for(lambda: parking(app, key).status().parked == 7, 60, message="members parked")
    open_gate(app, key)
    assert chained.get(timeout=120)["name"] == f"park:{key}"
    assert [r["name"] for r in grouped.get(timeout=120)] == [f"park:{key}"] * 3
    assert chorded.get(timeout=120) == 3
    for r in running:
        r.get(timeout=120)
    started = sorted(e["n"] for e in events(app, key, "start"))
    assert started == [0, 1, 10, 11, 12, 20, 21, 22, 30, 31, 32], "every member ran once"
    assert max_overlap(events(app, key)) <= LIMIT
    assert_nothing_left(app, key)


def test_child_killed_while_running(app: Any, worker: Any, key: str) -> None:
    task = app.tasks["basic.parked"]
    results = [task.delay(key, n, 120, True) for n in range(4)]
    wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
    victim = events(app, key, "start")[0]
    os.kill(victim["pid"], signal.SIGKILL)
    # The main process releases the dead child's slot and promotes the next.
    wait_for(lambda: len(events(app, key, "start")) == LIMIT + 1, 60, message="promoted")
    open_gate(app, key)
    for r in results:
        if r.id != victim["id"]:
            r.get(timeout=120)
    started = [e["id"] for e in events(app, key, "start")]
    assert sorted(started) == sorted(r.id for r in results)
    assert max_overlap([e for e in events(app, key) if e["id"] != victim["id"]]) <= LIMIT
    assert_nothing_left(app, key)


def test_revoke_and_expiry_of_parked_tasks(app: Any, worker: Any, key: str) -> None:
    task = app.tasks["basic.parked"]
    running = fill_the_name(app, key)
    revoked = task.delay(key, 10, 0.1)
    revoked_by_id = task.delay(key, 11, 0.1)
    expired = task.apply_async((key, 12, 0.1), expires=1)
    last = task.delay(key, 13, 0.1)
    assert park.revoke(app, revoked.id, name=f"park:{key}") == "parked"
    park.revoke(app, revoked_by_id.id)  # no name: dropped when promotion meets it

    def expiry_passed() -> bool:
        entries = parking(app, key).status(count=10).entries
        return any(e["task_id"] == expired.id and e["expires_in"] < 0 for e in entries)

    wait_for(expiry_passed, 30, interval=0.1, message="expiry passed (Redis time)")
    open_gate(app, key)
    last.get(timeout=120)
    for r in running:
        r.get(timeout=120)
    ran = {e["id"] for e in events(app, key, "start")}
    assert ran == {r.id for r in running} | {last.id}
    assert revoked.state == revoked_by_id.state == expired.state == "REVOKED"
    dropped = {
        (s["task_id"], s["reason"])
        for s in app.recorder.signals()
        if s["signal"] == "redislock_dropped" and s["name"] == f"park:{key}"
    }
    assert dropped == {
        (revoked.id, "revoked"),
        (revoked_by_id.id, "revoked"),
        (expired.id, "expired"),
    }
    assert_nothing_left(app, key)


@pytest.mark.parametrize("worker_events", [False, True], ids=["no-events", "worker-events"])
def test_a_park_whose_states_reach_nobody_takes_no_state_guard(
    redis_url: str, worker_events: bool, tmp_path: Any
) -> None:
    """With no result backend and no task events, no state of a parked task
    is written anywhere, so no park script takes its state guard and nobody
    gives one back (``state_free.lua``: a round trip per ``PARKED`` and per
    ``PROMOTED``): not the caller's enqueue, not the worker's arrival of a
    message without a token (``send_task``), not a release's or the
    sweeper's promotion.  A worker that sends task events (``-E``) still
    guards the states it sends.  Every call runs once either way."""
    import redis

    config = sweeping_config(redis_url, backend="none")
    app = create_app(config)
    prefix = config["prefix"]
    seen: list[str] = []  # every command on this prefix's keys
    failed: list[BaseException] = []
    stop = threading.Event()

    def watch() -> None:
        try:
            with redis.Redis.from_url(redis_url).monitor() as monitor:
                while not stop.is_set():
                    command = monitor.next_command()["command"]
                    if prefix in command:
                        seen.append(command)
        except BaseException as exc:  # the test fails with it below
            failed.append(exc)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    extra_args = ("-E",) if worker_events else ()
    try:
        with worker_factory(tmp_path) as start:
            start(config, pool="prefork", concurrency=2, extra_args=extra_args)
            key = f"k{uuid.uuid4().hex[:8]}"
            task = app.tasks["basic.parked"]
            ids = [task.delay(key, n, 0.3).id for n in range(6)]  # 2 reserved, 4 parked
            # without a token: admitted or parked when they arrive at the worker
            ids += [app.send_task("basic.parked", (key, n, 0.3)).id for n in range(6, 8)]
            wait_for(lambda: len(events(app, key, "end")) == 8, 90, message="all eight ran")
            assert_all_ran_once(app, key, ids)
    finally:
        stop.set()
        redis.Redis.from_url(redis_url).ping()  # wakes the watcher to see it
        watcher.join(10)
    assert not watcher.is_alive() and not failed, failed
    assert any(f"{{park:{key}}}:parked" in c for c in seen), "the watcher saw the park's commands"
    guards = [c for c in seen if ":state:" in c]
    if worker_events:  # each release that promoted guarded its PROMOTED, and gave it back
        assert any(c.startswith("SET ") and " NX " in c for c in guards), guards
        assert any(c.startswith("DEL ") for c in guards), guards
    else:
        assert guards == []


def test_park_bound_is_a_clear_error(redis_url: str, key: str) -> None:
    app = create_app({"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", "park_max": "2"})
    task = app.tasks["basic.parked"]
    # No worker: the two published ones reserve, the next two park, the fifth is refused.
    results = [task.delay(key, n) for n in range(4)]
    assert [r.state for r in results[LIMIT:]] == [park.PARKED] * 2
    with pytest.raises(park.ParkFull):
        task.delay(key, 4)
    assert parking(app, key).status().parked == 2


def test_bound_over_all_names_is_a_clear_error(redis_url: str) -> None:
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    app = create_app({"redis": redis_url, "prefix": prefix, "park_max_total": "3"})
    task = app.tasks["basic.parked"]
    a, b = f"a{uuid.uuid4().hex[:8]}", f"b{uuid.uuid4().hex[:8]}"
    # No worker: per name two reserve; then parked: a 2, b 1 (3 in all).
    parked_a = [task.delay(a, n) for n in range(4)][LIMIT:]
    parked_b = [task.delay(b, n) for n in range(3)][LIMIT:]
    assert [r.state for r in parked_a + parked_b] == [park.PARKED] * 3
    with pytest.raises(park.ParkFull, match="over all names"):
        task.delay(b, 3)
    # A name with a free slot publishes: the bound is on parked tasks only.
    assert task.delay(f"c{uuid.uuid4().hex[:8]}", 0, 0.1).state == "PENDING"
    client, _ = client_for(app)
    assert int(client.get(park_total(prefix))) == 3
    # Leaving the list (discard, revoke, promotion) frees room in the total.
    assert park.discard(client, prefix, f"park:{a}", [parked_a[0].id]) == 1
    assert int(client.get(park_total(prefix))) == 2
    assert task.delay(b, 4).state == park.PARKED
    assert (parking(app, a).status().parked, parking(app, b).status().parked) == (1, 2)
    # Once nothing is parked anywhere, the counter key is gone too (no key left behind).
    # Discarding all of a name takes its promotions in flight too (two per name here).
    assert park.discard(client, prefix, f"park:{a}") == 1 + LIMIT
    assert park.discard(client, prefix, f"park:{b}") == 2 + LIMIT
    assert client.exists(park_total(prefix)) == 0
    with pytest.raises(ValueError, match="redislock_park_max_total"):
        app.conf.redislock_park_max_total = -1
        park_settings(app)


def test_sweeper_fills_all_slots_after_holders_died(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "3",
        "park_deadline": "4",
        "park_sweep": "0.5",
    }
    app = create_app(config)
    task = app.tasks["basic.parked"]
    with worker_factory(tmp_path_factory.mktemp("park-sweep")) as start:
        first = start(config, pool="prefork", concurrency=4)
        results = [task.delay(key, n, 120, True) for n in range(6)]
        wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
        first.kill()  # the whole worker: nobody releases, the leases expire
        dead = {e["id"] for e in events(app, key, "start")}
        start(config, pool="prefork", concurrency=4)
        # Both freed slots are filled at once, not one per sweep.
        wait_for(lambda: len(events(app, key, "start")) == 2 * LIMIT, 90, message="refilled")
        open_gate(app, key)
        for r in results:
            if r.id not in dead:
                r.get(timeout=120)
    assert {e["id"] for e in events(app, key, "start")} == {r.id for r in results}


RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"


def test_park_with_rabbitmq_as_broker(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Enqueue-time parking, promotion (anonymous exchange to the queue) and
    run-time parking of ``send_task`` messages with AMQP as the broker."""
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
        "broker": RABBITMQ_URL,
        "park_deadline": "4",
        "park_sweep": "0.5",
    }
    app = create_app(config)
    task = app.tasks["basic.parked"]
    with worker_factory(tmp_path_factory.mktemp("park-amqp")) as start:
        start(config, pool="prefork", concurrency=4)
        results = [task.delay(key, n, 120, True) for n in range(5)]
        sent = [app.send_task("basic.parked", args=(key, 10 + n, 120, True)).id for n in range(2)]
        wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
        wait_for(lambda: parking(app, key).status().parked == 5, 60, message="five parked")
        open_gate(app, key)
        for r in results:
            r.get(timeout=120)
        for task_id in sent:
            AsyncResult(task_id, app=app).get(timeout=120)
    assert_all_ran_once(app, key, [r.id for r in results] + sent)
    assert_nothing_left(app, key)


def test_countdown_retry_of_a_promoted_task_releases_its_slot(
    app: Any, worker: Any, key: str
) -> None:
    task = app.tasks["basic.parked"]
    gated = task.delay(key, 0, 120, True)
    wait_for(lambda: len(events(app, key, "start")) == 1, 60, message="gated one running")
    retrying = app.tasks["basic.parked_retry"].delay(key, 2.0)
    waiting = task.delay(key, 1, 0.1)
    # The retry gave its slot back before re-publishing: the parked one runs
    # while the gated one still holds the other slot (a kept slot would only
    # free at its 30 s ttl).
    waiting.get(timeout=20)
    assert not app.recorder.client.exists(f"{app.conf.redislock_prefix}:gate:{key}")
    open_gate(app, key)
    assert retrying.get(timeout=120) == 1
    starts = [e["t"] for e in app.recorder.events("parked_retry", key) if e["what"] == "start"]
    assert len(starts) == 2 and starts[1] - starts[0] >= 2.0 - 0.1  # its countdown was kept
    gated.get(timeout=120)
    assert_nothing_left(app, key)


def test_a_retry_is_parked_behind_the_calls_parked_meanwhile(
    app: Any, worker: Any, key: str
) -> None:
    """docs/park.md "Retries": a run's ``self.retry(countdown=...)`` gives its
    slot back, and the retry, when it arrives to a full key, is parked at the
    tail like any arriving message (BullMQ #2774 lost a retry's order: here
    the rule is stated, and kept)."""
    gated = app.tasks["basic.parked"].delay(key, 0, 120, True)
    wait_for(lambda: len(events(app, key, "start")) == 1, 60, message="the gated run")
    # its countdown leaves time to park ``behind`` first, however loaded the machine
    retrying = app.tasks["basic.parked_retry"].delay(key, 8.0)
    wait_for(lambda: app.recorder.events("parked_retry", key), 60, message="the run that retries")
    second = app.tasks["basic.parked"].delay(key, 1, 120, True)  # the slot the retry gave back
    wait_for(lambda: len(events(app, key, "start")) == 2, 60, message="the second gated run")
    behind = app.tasks["basic.parked"].delay(key, 2, 0.05)
    assert behind.state == park.PARKED
    wait_for(lambda: parking(app, key).status().parked == 2, 60, message="the retry parked")
    entries = parking(app, key).status(count=10).entries
    assert [e["task_id"] for e in entries] == [behind.id, retrying.id]
    open_gate(app, key)
    assert retrying.get(timeout=60) == 1
    for result in (gated, second, behind):
        result.get(timeout=60)
    assert_nothing_left(app, key)


def test_publisher_killed_after_reserve_before_publish(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
        "park_deadline": "4",
        "park_sweep": "0.5",
    }
    app = create_app(config)
    task = app.tasks["basic.parked"]
    with worker_factory(tmp_path_factory.mktemp("park-fault")) as start:
        start(config, pool="prefork", concurrency=4)
        results = [task.delay(key, n, 120, True) for n in range(5)]
        wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
        # The first child to release promotes the next task and dies before publishing.
        app.recorder.client.set(f"{config['prefix']}:fault:before_publish", 1)
        open_gate(app, key)
        for r in results:
            r.get(timeout=180, propagate=False)
    assert not app.recorder.client.exists(f"{config['prefix']}:fault:before_publish")
    # The releasing child died after its body ended: that one task reports
    # WorkerLostError; the one it had promoted was re-published by the sweeper.
    assert [r.state for r in results].count("SUCCESS") == len(results) - 1
    assert_all_ran_once(app, key, [r.id for r in results])
    assert len(events(app, key, "end")) == len(results)
    assert_nothing_left(app, key)


def drops(app: Any) -> list[str]:
    """Copies the worker dropped (recorded by the test app's fault hooks)."""
    raw = app.recorder.client.lrange(f"{app.conf.redislock_prefix}:park-drops", 0, -1)
    return [r.decode() for r in raw]


def test_child_killed_after_park_before_ack(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Late acks: the child that parked a message dies before the ack; the
    worker's main process finds the task in its park and acknowledges the
    message (no FAILURE, no requeue: the park has the task), and the parked
    task runs once when a slot frees."""
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    config = {
        "redis": redis_url,
        "prefix": prefix,
        "ttl": "30",
        "acks_late": "1",
        "park_deadline": "4",
        "park_sweep": "0.5",
    }
    app = create_app(config)
    client = app.recorder.client
    with worker_factory(tmp_path_factory.mktemp("park-after-park")) as start:
        worker = start(config, pool="prefork", concurrency=4)
        running = fill_the_name(app, key)
        client.set(f"{prefix}:fault:after_park", 1)
        sent = app.send_task("basic.parked", args=(key, 9, 0.1)).id
        wait_for(lambda: not client.exists(f"{prefix}:fault:after_park"), 60, message="killed")
        assert parking(app, key).status().parked == 1
        wait_for(
            lambda: (
                f"[{sent}]: its process died after the task was parked"
                in worker.log_path.read_text(errors="replace")
            ),
            120,
            message="the main process finding it parked",
        )
        assert parking(app, key).status().parked == 1
        # Not FAILURE; PENDING, as the child died before it stored PARKED.
        assert AsyncResult(sent, app=app).state in ("PENDING", "PARKED")
        assert client.llen(f"q-{prefix}") == 0  # acknowledged, not requeued
        open_gate(app, key)
        for r in running:
            r.get(timeout=120)
        wait_for(lambda: AsyncResult(sent, app=app).state == "SUCCESS", 120, message="ran")
    assert_all_ran_once(app, key, [r.id for r in running] + [sent])
    assert len(events(app, key, "end")) == LIMIT + 1
    assert_nothing_left(app, key)


def test_promoted_message_lost_late_or_duplicated(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """After publish, before arrival: a promoted message that never arrives is
    re-published by the sweeper after the deadline, with a warning naming
    it; the late original and a duplicate copy are dropped.  Each task runs
    exactly once."""
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    config = {
        "redis": redis_url,
        "prefix": prefix,
        "ttl": "30",
        "park_deadline": "4",
        "park_sweep": "0.5",
    }
    app = create_app(config)
    task = app.tasks["basic.parked"]
    client = app.recorder.client
    with worker_factory(tmp_path_factory.mktemp("park-lost")) as start:
        worker = start(config, pool="prefork", concurrency=4)
        results = [task.delay(key, n, 120, True) for n in range(6)]
        wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
        client.set(f"{prefix}:fault:lose_publish", 1)
        client.set(f"{prefix}:fault:late_publish", 10)  # well past the 4 s deadline
        client.set(f"{prefix}:fault:dup_publish", 1)
        open_gate(app, key)
        for r in results:
            r.get(timeout=180)
        points = ("lose_publish", "late_publish", "dup_publish")
        assert not client.exists(*(f"{prefix}:fault:{p}" for p in points)), "every fault fired"
        wait_for(
            lambda: len(client.lrange(f"{prefix}:fault-log", 0, -1)) == 3,
            60,
            message="the late copy sent",
        )
        faults = [f.decode().split() for f in client.lrange(f"{prefix}:fault-log", 0, -1)]
        late = next(i for what, i in faults if what == "late")
        dup = next(i for what, i in faults if what == "dup")
        lost = next(i for what, i in faults if what == "lost")
        assert f"basic.parked[{lost}] published again for 'park:{key}'" in worker.log_tail(10_000)
        wait_for(
            lambda: {d.split()[0] for d in drops(app)} >= {late, dup},
            60,
            message="the late and the duplicate copy dropped",
        )
        wait_for(lambda: queue_length(app) == 0, 60, message="queue drained")
    assert_all_ran_once(app, key, [r.id for r in results])
    assert len(events(app, key, "end")) == len(results)
    assert_nothing_left(app, key)


def test_cli_lists_and_discards_parked_tasks(redis_url: str, key: str) -> None:
    from celery.bin.celery import celery as celery_main
    from click.testing import CliRunner

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    app = create_app({"redis": redis_url, "prefix": prefix})
    task = app.tasks["basic.parked"]
    results = [task.delay(key, n) for n in range(5)]  # no worker: 2 in flight, 3 parked
    base = ["redislock", "--url", redis_url, "--prefix", prefix]

    def cli(*args: str) -> str:
        result = CliRunner().invoke(celery_main, [*base, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return str(result.output)

    [row] = json.loads(cli("parked", "--json", "--list", "10"))
    assert (row["name"], row["parked"], row["in_flight"], row["overdue"]) == (
        f"park:{key}",
        3,
        2,
        0,
    )
    assert [e["task_id"] for e in row["entries"]] == [r.id for r in results[LIMIT:]]
    assert sorted(e["task_id"] for e in row["promoted"]) == sorted(r.id for r in results[:LIMIT])
    listed = cli("parked", "--list", "10")
    assert all(f"{r.id}  basic.parked" in listed for r in results)
    assert listed.count("promoted, deadline in") == LIMIT
    assert f"park:{key}  [parked]  3 parked" in cli("parked")
    assert f"park:{key}  [parked]  3 parked" in cli("status")  # status shows it too
    [in_status] = json.loads(cli("status", "--json"))["parked"]
    assert (in_status["parked"], in_status["in_flight"]) == (3, 2)
    assert "discarded 1 task(s)" in cli(
        "discard-parked", f"park:{key}", "--task-id", results[2].id, "-f"
    )
    # All: the two parked ones and the two promotions in flight.
    assert "discarded 4 task(s)" in cli("discard-parked", f"park:{key}", "-f")
    status = parking(app, key).status()
    assert (status.parked, status.in_flight) == (0, 0)
    assert holders(app, key) == []  # the reservations went with them


def test_worker_warns_when_the_lock_redis_persists_nothing(
    redis_url: str, own_redis: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Broker and results on one Redis, locks (and parked tasks) on another
    # that runs with --save "" --appendonly no.
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "lock_redis": own_redis.url,
    }
    with worker_factory(tmp_path_factory.mktemp("park-volatile")) as start:
        worker = start(config, pool="prefork", concurrency=1)
        wait_for(
            lambda: "persists nothing" in worker.log_path.read_text(errors="replace"),
            60,
            interval=0.1,
            message="the warning in the worker log",
        )


def test_a_plainly_revoked_promoted_task_gives_its_slot_back(
    app: Any, worker: Any, key: str
) -> None:
    """The worker discards it (it remembers the revoke): the reservation passes on
    at once (this worker does not sweep), and a record keeps it from ever running."""
    task = app.tasks["basic.parked"]
    running = fill_the_name(app, key)
    revoked, after = task.delay(key, 10, 0.1), task.delay(key, 11, 0.1)
    assert revoked.state == after.state == park.PARKED
    replies = app.control.revoke(revoked.id, reply=True, timeout=10)  # Celery's own revoke
    assert replies, "the worker acknowledged the revoke"
    open_gate(app, key)
    after.get(timeout=60)  # the name is not stuck behind the revoked task
    for r in running:
        r.get(timeout=60)
    wait_for(lambda: revoked.state == "REVOKED", 30, message="REVOKED")
    assert revoked.id not in {e["id"] for e in events(app, key, "start")}
    client, settings = client_for(app)
    assert client.exists(revoke_record(settings.prefix, revoked.id))
    # Once workers forget the revoke, a copy still never runs: arrival reads the record.
    app.send_task("basic.parked", (key, 10, 0.1), task_id=revoked.id)
    wait_for(lambda: queue_length(app) == 0, 60, message="copy consumed")
    last = task.delay(key, 12, 0.1)
    last.get(timeout=60)
    assert revoked.id not in {e["id"] for e in events(app, key, "start")}
    assert_nothing_left(app, key)


def test_a_revoke_record_is_honoured_on_arrival(app: Any, worker: Any, key: str) -> None:
    """park.revoke's record reaches a worker that missed the broadcast, with a
    promotion token (its reservation passes on) and without one (send_task)."""
    client, settings = client_for(app)
    task = app.tasks["basic.parked"]
    reserved_id, sent_id = str(uuid.uuid4()), str(uuid.uuid4())
    for task_id in (reserved_id, sent_id):  # the record only: no broadcast reaches the worker
        client.set(revoke_record(settings.prefix, task_id), 1, ex=600)
    reserved = task.apply_async((key, 1, 0.1), task_id=reserved_id)  # free name: reserved
    sent = app.send_task("basic.parked", (key, 2, 0.1), task_id=sent_id)
    wait_for(lambda: reserved.state == sent.state == "REVOKED", 60, message="both REVOKED")

    def dropped() -> set[tuple[str, str]]:
        return {
            (s["task_id"], s["reason"])
            for s in app.recorder.signals()
            if s["signal"] == "redislock_dropped" and s["name"] == f"park:{key}"
        }

    expected = {(reserved_id, "revoked"), (sent_id, "revoked")}
    wait_for(lambda: dropped() == expected, 30, message=f"lock_dropped for both: {dropped()}")
    following = [task.delay(key, n, 0.1) for n in range(3, 3 + LIMIT + 1)]
    for r in following:
        r.get(timeout=60)  # the dropped reservation did not keep a slot
    assert {e["id"] for e in events(app, key, "start")} == {r.id for r in following}
    assert_nothing_left(app, key)


def test_an_expired_delivery_frees_its_reservation_at_once(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A reservation deadline of 120 s: only the discard itself can free the slot sooner.
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
        "park_deadline": "120",
        "park_sweep": "0.5",
    }
    app = create_app(config)
    task = app.tasks["basic.parked"]
    expiring = task.apply_async((key, 1, 0.1), expires=1)  # reserved, in the broker
    assert len(holders(app, key)) == 1
    let_redis_time_pass(app, 2, "its expiry passed")
    with worker_factory(tmp_path_factory.mktemp("park-expired")) as start:
        start(config, pool="prefork", concurrency=2)
        wait_for(lambda: expiring.state == "REVOKED", 60, message="discarded as expired")
        wait_for(lambda: holders(app, key) == [], 30, message="its reservation given back")
        later = [task.delay(key, n, 0.1) for n in range(2, 2 + LIMIT)]
        for r in later:
            r.get(timeout=60)
    assert expiring.id not in {e["id"] for e in events(app, key, "start")}
    assert_nothing_left(app, key)


def test_a_promoted_task_never_joins_more_holders_than_its_own_limit(
    app: Any, worker: Any, key: str
) -> None:
    """Two task names share one key with limits 5 and 2: a limit-2 task promoted by
    a limit-5 release does not start beside two or more holders."""
    wide, narrow = app.tasks["basic.parked_wide"], app.tasks["basic.parked"]
    first = [wide.delay(key, n, 120, True) for n in range(4)]

    def wide_started() -> int:
        return sum(e["what"] == "start" for e in app.recorder.events("parked_wide", key))

    wait_for(lambda: wide_started() == 4, 60, message="four wide ones running")
    later = [narrow.delay(key, 10 + n, 0.3) for n in range(3)] + [wide.delay(key, 20, 0.3)]
    assert all(r.state == park.PARKED for r in later[:3])
    open_gate(app, key)  # wide ones release and promote
    for r in first + later:
        r.get(timeout=120)
    tagged = [(e, 2) for e in app.recorder.events("parked", key)]
    tagged += [(e, 5) for e in app.recorder.events("parked_wide", key)]
    running: set[str] = set()
    for event, limit in sorted(tagged, key=lambda pair: pair[0]["t"]):
        if event["what"] == "start":
            assert len(running) < limit, (event, limit, running)  # its own limit, counting it
            running.add(event["id"])
        else:
            running.discard(event["id"])
    assert len(tagged) == 2 * len(first + later)


def test_a_lowered_limit_holds_for_tasks_already_promoted(app: Any, worker: Any, key: str) -> None:
    """A per-account limit lowered from 3 to 1 while 3 tasks are published but not
    started: they run one at a time."""
    task = app.tasks["basic.parked_plan"]
    client = app.recorder.client
    plan_key = f"{app.conf.redislock_prefix}:plan:{key}"
    client.set(plan_key, 3)
    # Every child of the worker busy, so the three wait in the broker, not started.
    blockers = [f"{key}-busy{n}" for n in range(4)]
    busy = [app.tasks["basic.refresh_cache"].delay(b, 120, True) for b in blockers]
    wait_for(
        lambda: all(app.recorder.events("refresh_cache", b) for b in blockers), 60, message="busy"
    )
    results = [task.delay(key, n, 0.5) for n in range(3)]  # reserved and published at limit 3
    assert parking(app, key).status().parked == 0
    assert app.recorder.events("parked_plan", key) == []
    client.set(plan_key, 1)
    for b in blockers:
        open_gate(app, b)
    for r in busy + results:
        r.get(timeout=120)
    assert max_overlap(app.recorder.events("parked_plan", key)) == 1


def test_a_promoted_task_says_so_and_status_shows_reservations_apart(
    redis_url: str, key: str
) -> None:
    from celery.bin.celery import celery as celery_main
    from click.testing import CliRunner

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    app = create_app({"redis": redis_url, "prefix": prefix})
    task = app.tasks["basic.parked"]
    results = [task.delay(key, n) for n in range(3)]  # no worker: 2 in flight, 1 parked
    assert results[2].state == park.PARKED
    parking(app, key).drop(results[0].id)  # its reservation given back (as a discard does)
    assert promote(app, f"park:{key}", Capacity.semaphore(LIMIT)) == 1
    assert results[2].state == park.PROMOTED  # in the broker now, not parked
    assert park.PROMOTED == "PROMOTED"
    out = (
        CliRunner()
        .invoke(
            celery_main,
            ["redislock", "--url", redis_url, "--prefix", prefix, "status"],
            catch_exceptions=False,
        )
        .output
    )
    assert "0 held, 2 reserved for promoted tasks, 0 waiting" in out, out
    assert f"park:{key}  [semaphore]  held 0 (+2 reserved for promoted tasks)" in out, out
    assert out.count("(promoted, not yet started)") == 2, out
    assert results[2].id in out and "?:?" not in out, out


def require_rabbitmq() -> None:
    from tests.celery.test_crash import rabbitmq_reachable

    if not rabbitmq_reachable():
        message = f"RabbitMQ not reachable at {RABBITMQ_URL}: the per-call routing test needs it"
        if os.environ.get("REDISLOCK_REQUIRE_RABBITMQ"):
            pytest.fail(message + " (REDISLOCK_REQUIRE_RABBITMQ is set)")
        pytest.skip(message + " (apt-get install rabbitmq-server)")


def rabbitmq_config(redis_url: str, **extra: str) -> dict[str, str]:
    """A test app's config with RabbitMQ as the broker (Redis for the rest)."""
    return {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
        "broker": RABBITMQ_URL,
        "park_sweep": "0.5",
        **extra,
    }


def routed_config(broker: str, redis_url: str, **extra: str) -> dict[str, str]:
    """A test app's config on ``broker`` ("redis" or "rabbitmq")."""
    if broker == "rabbitmq":
        require_rabbitmq()
        return rabbitmq_config(redis_url, **extra)
    return {k: v for k, v in rabbitmq_config(redis_url, **extra).items() if k != "broker"}


def delete_queues(app: Any, *names: str) -> None:
    """Delete a test's RabbitMQ queues (quorum queues outlive their consumers)."""
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        for name in names:
            channel.queue_delete(name)


def test_a_requeue_names_the_queue_its_message_was_delivered_to() -> None:
    """The queue a requeue names (``policies/retry.py`` ``consumed_queue``):
    the routing key of the anonymous exchange; the app's queue an exchange
    and routing key name, the one this worker consumes when several do, else
    none (Celery's route: the exchange reaches them all); through RabbitMQ's
    delayed exchanges, the queue of the key after the delay's bits."""
    from celery import Celery
    from kombu import Exchange, Queue

    from celery_redislock.policies.retry import consumed_queue

    app = Celery("requeue-route", set_as_current=False)
    tasks = Exchange("tasks")
    app.conf.task_queues = [
        Queue("a", tasks, routing_key="jobs"),
        Queue("b", tasks, routing_key="jobs"),
        Queue("c", tasks, routing_key="other"),
    ]
    delayed = "0." * 27 + "1."
    assert consumed_queue(app, {"exchange": "", "routing_key": "x"}) == "x"
    assert consumed_queue(app, {"exchange": "tasks", "routing_key": "other"}) == "c"
    assert consumed_queue(app, {"exchange": "tasks", "routing_key": "jobs"}) is None
    assert consumed_queue(app, {"exchange": "tasks", "routing_key": "special.x"}) is None
    delivered = {"exchange": "celery_delayed_delivery", "routing_key": delayed + "other"}
    assert consumed_queue(app, delivered) == "c"
    app.amqp.queues.select(["b"])  # a worker started with -Q b
    assert consumed_queue(app, {"exchange": "tasks", "routing_key": "jobs"}) == "b"


def test_requeues_return_to_their_quorum_queue_behind_a_topic_exchange(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Quorum queues on a topic exchange: Celery (>= 5.5) sends a countdown
    through RabbitMQ's delayed exchanges by whole seconds, to the queue the
    call names, else to the default queue. A rate's requeues (``retry``,
    waits under a second) of calls sent to a queue a worker consumes alone
    come back to that queue and run, once each (they ended ``FAILURE``,
    "countdown must be a positive number", or stayed ``RETRY`` in the
    default queue)."""
    import celery

    if tuple(int(p) for p in celery.__version__.split(".")[:2]) < (5, 5):
        pytest.skip(f"quorum queues need Celery >= 5.5 (this is {celery.__version__})")
    config = routed_config("rabbitmq", redis_url, quorum="1")
    app = create_app(config)
    special = f"special-{config['prefix']}"
    try:
        with worker_factory(tmp_path_factory.mktemp("quorum-requeue")) as start:
            start(config, pool="prefork", concurrency=2, extra_args=("-Q", special))
            task = app.tasks["basic.rated_retry"]
            results = [task.apply_async((key, n), queue=special) for n in range(4)]
            for r in results:
                r.get(timeout=120)
    finally:
        delete_queues(app, special, f"q-{config['prefix']}")
    events = app.recorder.events("rated_retry", key)
    started = [e["id"] for e in events if e["what"] == "start"]
    assert sorted(started) == sorted(r.id for r in results)


def test_a_call_parked_on_arrival_goes_back_through_the_exchange_it_came_by(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A topic exchange whose routing key is also the name of another queue
    (``orders-<prefix>.eu``): calls sent through the exchange, parked when
    their message arrived (a countdown), are published again through that
    exchange, to the queue bound to it, not to the queue named like the key
    (no worker consumes it: they never ran)."""
    config = routed_config("rabbitmq", redis_url, collide="1", park_deadline="30")
    app = create_app(config)
    prefix = config["prefix"]
    route = {"exchange": f"orders-{prefix}", "routing_key": f"orders-{prefix}.eu"}
    task = app.tasks["basic.parked"]
    try:
        with worker_factory(tmp_path_factory.mktemp("park-collide")) as start:
            start(config, pool="prefork", concurrency=4, extra_args=("-Q", f"work-{prefix}"))
            held = [task.apply_async((key, n, 120, True), **route) for n in range(LIMIT)]
            wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="the key full")
            later = [task.apply_async((key, n, 0.1), countdown=1, **route) for n in (8, 9)]
            wait_for(
                lambda: all(r.state == park.PARKED for r in later), 60, message="parked on arrival"
            )
            open_gate(app, key)
            for r in [*held, *later]:
                r.get(timeout=120)
    finally:
        delete_queues(app, f"work-{prefix}", f"orders-{prefix}.eu", f"q-{prefix}")
    assert_all_ran_once(app, key, [r.id for r in [*held, *later]])


def test_promotion_resends_where_per_call_routing_sent_the_task(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A topic exchange and a routing key per call, to a worker consuming only the
    queue bound to it: promoted tasks go back there, not to the default queue.
    RabbitMQ only: on the Redis transport an exchange the caller never declared
    is taken as direct, so Celery itself drops such a call unparked (kombu's
    warning "no queues bound"); the queue forms are tested on both below."""
    config = routed_config("rabbitmq", redis_url, park_deadline="30", topic="1")
    app = create_app(config)
    task = app.tasks["basic.parked"]
    route = {"exchange": f"topic-{config['prefix']}", "routing_key": "special.reports"}
    with worker_factory(tmp_path_factory.mktemp("park-topic")) as start:
        start(
            config, pool="prefork", concurrency=4, extra_args=("-Q", f"special-{config['prefix']}")
        )
        results = [task.apply_async((key, n, 120, True), **route) for n in range(5)]
        wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
        assert parking(app, key).status().parked == 3
        open_gate(app, key)
        for r in results:
            r.get(timeout=120)
    assert_all_ran_once(app, key, [r.id for r in results])
    assert_nothing_left(app, key)


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
@pytest.mark.parametrize("routed", ["a queue named per call", "an app queue on a topic exchange"])
def test_a_promotion_declares_the_queue_its_call_would_have_declared(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory, routed: str, broker: str
) -> None:
    """A call parked at enqueue was never published, so nothing declared its
    queue: the promotion declares it as Celery's publish would have, and a
    worker that starts consuming it later gets the task (RabbitMQ drops a
    message sent to a queue that does not exist; the Redis transport one
    sent to an exchange with no binding)."""
    # park_deadline: a re-publish after the deadline would come too late
    config = routed_config(broker, redis_url, park_deadline="300", topic="1")
    prefix = config["prefix"]
    app = create_app(config)
    queue = f"late-{prefix}" if routed.startswith("a queue named") else f"special-{prefix}"
    task = app.tasks["basic.parked"]
    try:
        with worker_factory(tmp_path_factory.mktemp("park-declare")) as start:
            start(config, pool="prefork", concurrency=2, extra_args=("-Q", f"q-{prefix}"))
            holders = [task.delay(key, n, 120, True) for n in range(LIMIT)]
            wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
            late = task.apply_async((key, 9, 0.1), queue=queue)
            wait_for(lambda: parking(app, key).status().parked == 1, 60, message="parked")
            open_gate(app, key)
            wait_for(lambda: late.state == park.PROMOTED, 60, message="promoted")
            start(config, pool="solo", concurrency=1, extra_args=("-Q", queue))
            assert late.get(timeout=60)["name"] == f"park:{key}"
            for holder in holders:
                holder.get(timeout=60)
    finally:
        with app.connection_for_write() as connection:
            channel = connection.default_channel
            channel.queue_delete(queue)
            if queue.startswith("late-"):
                channel.exchange_delete(queue)
    assert_all_ran_once(app, key, [*(h.id for h in holders), late.id])


def test_a_call_parked_at_arrival_keeps_the_serializer_it_was_sent_with(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A per-call ``serializer=`` other than the task's: the message parked on
    arrival is stored, and promoted, in the serializer it came in (a frozenset
    has no JSON form)."""
    config = {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "ttl": "30",
        "park_sweep": "0.5",
        "pickle": "1",
    }
    app = create_app(config)
    with worker_factory(tmp_path_factory.mktemp("park-serializer")) as start:
        start(config, pool="prefork", concurrency=3)  # one process free for the arrival
        holders = [app.tasks["basic.parked"].delay(key, n, 120, True) for n in range(LIMIT)]
        wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
        call = app.tasks["basic.parked_payload"].apply_async(
            (key, frozenset({1})), countdown=0.2, serializer="pickle"
        )
        wait_for(lambda: call.state == park.PARKED, 60, message="parked at arrival")
        open_gate(app, key)
        assert call.get(timeout=60)["name"] == f"park:{key}"
        for holder in holders:
            holder.get(timeout=60)
    (run,) = app.recorder.events("parked_payload", key)[:1]
    assert run["payload"] == "frozenset frozenset({1})"
    assert REQUEST_CONTENT_TYPE not in run["headers"]  # the worker's field, not a header


def test_a_promoted_call_keeps_what_its_caller_sent(app: Any, worker: Any, key: str) -> None:
    """Celery's ``signature_from_request(...).apply_async()`` drops argsrepr,
    kwargsrepr, per-call options, and makes the re-publishing task the
    parent.  A parked call is promoted as it was sent: the body sees the
    same request fields as the same call that found room."""
    options = {
        "argsrepr": "(<key>, <secret>)",
        "kwargsrepr": "{}",
        "priority": 5,
        "compression": "zlib",
    }
    task = app.tasks["basic.parked_payload"]
    free = task.apply_async((f"{key}-free", "secret"), **options)
    free.get(timeout=60)
    running = fill_the_name(app, key)
    parked = task.apply_async((key, "secret"), **options)
    assert parked.state == park.PARKED
    open_gate(app, key)
    parked.get(timeout=60)
    for r in running:
        r.get(timeout=60)
    (as_sent,) = app.recorder.events("parked_payload", f"{key}-free")[:1]
    (promoted,) = app.recorder.events("parked_payload", key)[:1]
    fields = ("argsrepr", "kwargsrepr", "priority", "ignore_result", "payload")
    assert {f: promoted[f] for f in fields} == {f: as_sent[f] for f in fields}
    assert promoted["argsrepr"] == "(<key>, <secret>)" and promoted["priority"] == 5, promoted
    # its own root, no parent: not the task whose release promoted it
    assert (promoted["parent_id"], promoted["root_id"]) == (None, parked.id)
    assert (as_sent["parent_id"], as_sent["root_id"]) == (None, free.id)


def test_an_rpc_result_backend_parks_and_runs_each_call_once(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Celery's ``rpc://`` backend carries a task's states only from its own
    run to its caller: a call that parks does not raise (its PARKED is not
    written there, it would reach no one or the wrong caller), and every
    call runs once and returns its result to its own caller."""
    require_rabbitmq()
    config = rabbitmq_config(redis_url, backend="rpc://", park_deadline="30")
    app = create_app(config)
    task = app.tasks["basic.parked"]
    with worker_factory(tmp_path_factory.mktemp("park-rpc")) as start:
        start(config, pool="prefork", concurrency=4)
        results = [task.delay(key, n, 120, True) for n in range(5)]  # three park: no exception
        wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="two running")
        wait_for(lambda: parking(app, key).status().parked == 3, 60, message="three parked")
        open_gate(app, key)
        assert [r.get(timeout=120)["name"] for r in results] == [f"park:{key}"] * 5
    assert_all_ran_once(app, key, [r.id for r in results])
    assert_nothing_left(app, key)


def test_dedupe_markers_follow_the_parked_task_s_real_fate(app: Any, worker: Any, key: str) -> None:
    """Parked at arrival: the marker stays (a second call is not published).
    Expired while parked: the marker goes (a later call is published and runs)."""
    dedupe_task = app.tasks["basic.parked_dedupe"]
    running = fill_the_name(app, key)
    # A countdown call is published as is, and parked when it arrives (the name is full).
    first = dedupe_task.apply_async((key, 1), countdown=0.1)
    wait_for(lambda: first.state == park.PARKED, 60, message="parked at arrival")
    again = dedupe_task.apply_async((key, 2))
    assert again.id == first.id  # still pending: de-duplicated, not published
    open_gate(app, key)
    for r in [*running, first]:
        r.get(timeout=60)
    ran = [e["id"] for e in app.recorder.events("parked_dedupe", key) if e["what"] == "start"]
    assert ran == [first.id]
    # The marker is given back once it ran: the next call is published.
    app.recorder.client.delete(f"{app.conf.redislock_prefix}:gate:{key}")
    running = fill_the_name(app, key, first=10)
    expiring = dedupe_task.apply_async((key, 3), expires=1)  # parked at enqueue
    assert expiring.id != first.id and expiring.state == park.PARKED
    let_redis_time_pass(app, 2, "its expiry passed")
    open_gate(app, key)
    for r in running:
        r.get(timeout=60)
    wait_for(lambda: expiring.state == "REVOKED", 60, message="expired while parked")
    after = dedupe_task.apply_async((key, 4))
    assert after.id != expiring.id  # the marker went with the task: published
    after.get(timeout=60)
    ran = [e["id"] for e in app.recorder.events("parked_dedupe", key) if e["what"] == "start"]
    assert ran == [first.id, after.id]
    assert_nothing_left(app, key)


def test_a_chord_counts_a_member_revoked_or_expired_while_parked(
    app: Any, worker: Any, key: str
) -> None:
    """As with plain tasks, the chord ends (ChordError) instead of staying PENDING."""
    from celery.exceptions import ChordError

    task = app.tasks["basic.parked"]
    running = fill_the_name(app, key)
    header = [
        task.si(key, 30, 0.05),
        task.si(key, 31, 0.05).set(expires=1),
        task.si(key, 32, 0.05),
        task.si(key, 33, 0.05),
    ]
    chorded = chord(header, app.tasks["basic.collect"].s()).apply_async()
    wait_for(lambda: parking(app, key).status().parked == 4, 60, message="members parked")
    [revoked_id] = [
        e["task_id"]
        for e in parking(app, key).status(count=4).entries
        if ", 33, " in (e["argsrepr"] or "")
    ]
    assert park.revoke(app, revoked_id, name=f"park:{key}") == "parked"
    let_redis_time_pass(app, 2, "one member expired")
    open_gate(app, key)
    # The chord body itself is marked failed once every member counted (its
    # .get() would re-raise the revoked member's error from the header first).
    wait_for(lambda: chorded.state == "FAILURE", 120, message="the chord body FAILURE")
    assert isinstance(chorded.result, ChordError), repr(chorded.result)
    for r in running:
        r.get(timeout=120)
    assert sorted(e["n"] for e in events(app, key, "start")) == [0, 1, 30, 32]
    assert_nothing_left(app, key)


def fetched_behind_busy_children(
    app: Any, worker: Any, key: str, calls: int = 1
) -> tuple[list[Any], list[str]]:
    """Both children of ``worker`` (prefork, concurrency 2) busy with gated
    runs, then ``calls`` calls of ``basic.parked`` on the free name ``key``
    (reserved at the call): returns them, once the worker logged them
    received (fetched, not started), and the blockers' keys (``open_gate``
    ends their runs)."""
    blockers = [f"{key}-busy{n}" for n in range(2)]
    for b in blockers:
        app.tasks["basic.refresh_cache"].delay(b, 120, True)
    wait_for(
        lambda: all(app.recorder.events("refresh_cache", b) for b in blockers),
        60,
        message="both children busy",
    )
    results = [app.tasks["basic.parked"].delay(key, n + 1, 0.1) for n in range(calls)]
    # Logged once kombu recorded it as unacked (before that, a kill would lose
    # the message in kombu's own window between BRPOP and that record).
    wait_for(
        lambda: all(f"basic.parked[{r.id}] received" in worker.log_tail() for r in results),
        60,
        message="the promoted messages fetched",
    )
    return results, blockers


def test_a_stale_copy_redelivered_after_a_whole_worker_kill_never_runs(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Redis broker: a worker SIGKILLed while it holds a fetched, not yet started
    promoted message.  The sweeper re-publishes the task with a new token and it
    runs; kombu later gives the old copy back (marked redelivered), and that copy
    is dropped by its stale token instead of running a second time.  The
    result backend is ``rpc://``, which keeps no state a worker can read, so
    the token alone decides (with a persistent backend the copy is dropped
    sooner, for the task's final state: docs/lifecycle.md)."""
    config = sweeping_config(redis_url, visibility="8", prefetch="2", backend="rpc://")
    app = create_app(config)
    with worker_factory(tmp_path_factory.mktemp("park-stale-redelivered")) as start:
        doomed = start(config, pool="prefork", concurrency=2)
        [result], _ = fetched_behind_busy_children(app, doomed, key)
        assert events(app, key) == []
        doomed.kill()
        start(config, pool="prefork", concurrency=2)
        result.get(timeout=120)  # re-published by the sweeper after the deadline
        waited = 8 + kombu_restore.restore_cadence() + 60
        wait_for(
            lambda: any(d.startswith(result.id) and "stale" in d for d in drops(app)),
            waited,
            message=f"the old copy given back and dropped ({kombu_restore.why()})",
        )
        wait_for(lambda: queue_length(app) == 0, 60, message="queue drained")
    assert [e["id"] for e in events(app, key, "start")] == [result.id]
    assert_nothing_left(app, key)


def test_a_promoted_message_a_warm_shutdown_gave_back_claims_its_reservation(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Redis broker: a worker stopped warm (SIGTERM) while it holds a fetched,
    not yet started promoted message; the broker gives the message back
    marked redelivered.  That copy is the task's first run: it claims its
    reservation at once on the next worker, not making way for a delivery
    that never started nor waiting for the sweeper to re-publish it after the
    reservation's deadline (300 s here; the key would run below its limit
    meanwhile)."""
    config = sweeping_config(redis_url, prefetch="2", park_deadline="300")
    app = create_app(config)
    with worker_factory(tmp_path_factory.mktemp("park-warm-promoted")) as start:
        stopping = start(config, pool="prefork", concurrency=2)
        [result], blockers = fetched_behind_busy_children(app, stopping, key)
        assert stopping.proc is not None
        stopping.proc.send_signal(signal.SIGTERM)  # warm: the running bodies finish
        for b in blockers:
            open_gate(app, b)
        assert stopping.proc.wait(60) == 0
        assert events(app, key) == []
        start(config, pool="prefork", concurrency=2)
        result.get(timeout=60)
    assert [e["id"] for e in events(app, key, "start")] == [result.id]
    assert not [d for d in drops(app) if d.startswith(result.id)]
    assert_nothing_left(app, key)


def test_a_promoted_call_whose_claim_fails_closed_runs_once_redis_answers_again(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The lock Redis stops answering (SIGSTOP) while promoted messages wait,
    fetched, in a worker: their claims fail closed (an ERROR line, the body
    does not run), but their reservations are still in Redis, so the calls
    do not end ``FAILURE``: each copy is published again with its token and
    a warning (it stores no state), again while Redis still does not answer,
    and once it answers a copy claims its reservation and each call runs
    once (``SUCCESS``, never a ``FAILURE`` before it)."""
    with RedisServer() as locks:
        config = sweeping_config(redis_url, lock_redis=locks.url, prefetch="2")
        app = create_app(config)
        with worker_factory(tmp_path_factory.mktemp("park-claim-closed")) as start:
            worker = start(config, pool="prefork", concurrency=2)
            published, blockers = fetched_behind_busy_children(app, worker, key, LIMIT)
            locks.pause()
            try:
                for b in blockers:
                    open_gate(app, b)
                wait_for(
                    lambda: all(
                        f"basic.parked[{r.id}]: its claim of a park reservation failed; "
                        "the message is published again to claim it once Redis answers "
                        "(try 2 of" in worker.log_tail(2000)
                        for r in published
                    ),
                    120,
                    message="both claims failed closed, and their copies' claims again",
                )
                assert [r.state for r in published] == ["PENDING"] * LIMIT  # reserved at the call
                assert events(app, key) == []
            finally:
                locks.resume()
            for r in published:
                r.get(timeout=120)
    assert sorted(e["id"] for e in events(app, key, "start")) == sorted(r.id for r in published)


def test_with_result_extended_a_parked_call_s_state_names_its_task(
    config: dict[str, str], worker: Any, key: str
) -> None:
    """``result_extended``: the ``PARKED`` a caller writes for a call parked at
    the call stores the task's name, as Celery's own states do (it stored
    none, and a database backend showed nameless rows)."""
    app = create_app(config)
    app.conf.result_extended = True
    task = app.tasks["basic.parked"]
    blockers = [task.delay(key, n, 120, True) for n in range(LIMIT)]
    wait_for(lambda: len(events(app, key, "start")) == LIMIT, 60, message="the key full")
    parked = task.delay(key, 9, 0.1)
    assert parked.state == park.PARKED
    assert parked.name == "basic.parked"
    open_gate(app, key)
    for r in [*blockers, parked]:
        r.get(timeout=120)


def test_a_promoted_call_a_misconfigured_worker_took_runs_on_a_good_one_without_a_failure(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A worker with a setting it cannot use (``redislock_default_ttl='30'``,
    as in a deploy gone wrong) takes a promoted call: it does not run it and
    stores no ``FAILURE`` (the reservation is still in Redis, so the park
    publishes the call again after its deadline); a worker whose settings
    work then runs it once, and the call never showed a final state before."""
    config = sweeping_config(redis_url)
    app = create_app(config)
    with worker_factory(tmp_path_factory.mktemp("park-bad-settings")) as start:
        bad = start({**config, "ttl_setting": "30"}, pool="prefork", concurrency=1)
        result = app.tasks["basic.parked"].delay(key, 1, 0.1)  # reserved at the call
        wait_for(
            lambda: f"basic.parked[{result.id}]: no state stored" in bad.log_tail(4000),
            60,
            message="the misconfigured worker dropped the copy",
        )
        assert f"basic.parked[{result.id}] not run, lock" in bad.log_tail(4000)
        assert result.state == "PENDING"
        bad.kill()
        start(config, pool="prefork", concurrency=1)
        result.get(timeout=120)
        assert result.state == "SUCCESS"
    assert [e["id"] for e in events(app, key, "start")] == [result.id]


def test_the_sweeper_logs_a_lock_redis_outage_once_and_its_end(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The lock Redis down while the sweeper runs every 0.5 s: one ERROR line
    (not one per sweep), and an INFO line when sweeps work again."""
    with RedisServer() as locks:
        config = sweeping_config(redis_url, lock_redis=locks.url)
        with worker_factory(tmp_path_factory.mktemp("park-sweeper-outage")) as start:
            worker = start(config, pool="prefork", concurrency=1)
            locks.kill()
            wait_for(
                lambda: "park sweeper: " in worker.log_tail(2000), 60, message="the ERROR line"
            )
            time.sleep(3)  # the observation window: six sweeps, each failing
            assert worker.log_tail(2000).count("park sweeper: ") == 1
            locks.start()
            wait_for(
                lambda: "park sweeper: sweeping again after" in worker.log_tail(2000),
                60,
                message="the INFO line",
            )


@pytest.mark.parametrize("task_name", ["basic.parked", "basic.keep_latest"])
def test_a_park_call_with_the_lock_redis_down_raises_its_error_and_publishes_nothing(
    redis_url: str, key: str, task_name: str
) -> None:
    """``delay()`` of a ``park`` (or ``keep_latest``) task while the lock Redis
    does not answer raises the Redis error, which names its address, and
    publishes nothing.  The decision is made inside Celery's publish, where a
    Redis broker's transport reports any Redis error as its own
    ``kombu.exceptions.OperationalError``, a broker error: it is raised once
    the publish returned, as the Redis error it is."""
    import redis.exceptions

    with RedisServer() as locks:
        config = sweeping_config(redis_url, lock_redis=locks.url)
        app = create_app(config)
        locks.stop()
        with pytest.raises(redis.exceptions.ConnectionError) as raised:
            app.tasks[task_name].delay(key, 1)
        assert f":{locks.port}" in str(raised.value)
        assert queue_length(app) == 0


def test_messages_in_the_broker_still_run_after_the_lock_redis_lost_its_data(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A lock Redis without persistence restarts while promoted messages wait in
    the broker: their tokens are unknown now, and they run through the normal
    admission (at least once), never dropped.  What was parked in that Redis is
    gone with it (docs/park.md)."""
    with RedisServer() as locks:
        config = sweeping_config(redis_url, lock_redis=locks.url)
        app = create_app(config)
        task = app.tasks["basic.parked"]
        published = [task.delay(key, n, 0.1) for n in range(LIMIT)]  # no worker yet
        assert queue_length(app) == LIMIT
        locks.restart()  # no persistence: the reservations are gone
        with worker_factory(tmp_path_factory.mktemp("park-lock-redis-lost")) as start:
            start(config, pool="prefork", concurrency=2)
            for r in published:
                r.get(timeout=60)
        assert sorted(e["id"] for e in events(app, key, "start")) == sorted(r.id for r in published)


def test_a_queue_slower_than_the_deadline_delays_a_promoted_task_never_starves_it(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A promoted message waits in a busy queue longer than its reservation
    deadline, and the sweeper re-publishes it behind ever more work.  The first
    copy to arrive is the task (it claims the reservation, whichever token it
    carries) and the later copies are dropped: it runs in its place in the
    queue, not only once the load stops."""
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    config = {
        "redis": redis_url,
        "prefix": prefix,
        "ttl": "30",
        "park_deadline": "1",
        "park_sweep": "0.2",
    }
    app = create_app(config)
    sleeper = app.tasks["basic.sleeper"]
    with worker_factory(tmp_path_factory.mktemp("park-slow-queue")) as start:
        start(config, pool="prefork", concurrency=1)
        ahead = [sleeper.delay(f"{key}-a{n}", 0.5) for n in range(8)]
        result = app.tasks["basic.parked"].delay(key, 1, 0.1)  # reserved, queued behind them
        behind = [sleeper.delay(f"{key}-b{n}", 0.5) for n in range(8)]
        for r in [*ahead, result, *behind]:
            r.get(timeout=120)
        wait_for(lambda: queue_length(app) == 0, 60, message="the later copies consumed")
    started = events(app, key, "start")
    assert [e["id"] for e in started] == [result.id]
    behind_starts = [app.recorder.events("sleeper", f"{key}-b{n}")[0]["t"] for n in range(8)]
    assert started[0]["t"] < min(behind_starts), "it ran in its place in the queue"
    stale = [d for d in drops(app) if d.startswith(result.id)]
    assert stale and all("stale" in d for d in stale), stale
    assert_nothing_left(app, key)


def test_a_promotion_no_worker_starts_is_given_up_with_a_final_state(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Promoted to a queue no worker consumes, and promoted under a task name no
    worker knows: re-published at each deadline, then given up after
    redislock_park_max_publishes, FAILURE with ParkUnclaimed, a log line and
    lock_dropped; the slot passes on and nothing is re-published after that."""
    from celery_redislock import ParkUnclaimed, SemaphoreTask

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    config = {
        "redis": redis_url,
        "prefix": prefix,
        "ttl": "30",
        "park_deadline": "1",
        "park_sweep": "0.2",
    }
    app = create_app(config)
    app.conf.redislock_park_max_publishes = 3

    @app.task(
        shared=False,
        base=SemaphoreTask,
        name="basic.client_only",
        semaphore_key="park:{key}",
        semaphore_limit=LIMIT,
    )
    def client_only(key: str) -> None:  # registered here only, never in the worker
        raise AssertionError("never runs")

    task = app.tasks["basic.parked"]
    with worker_factory(tmp_path_factory.mktemp("park-unclaimed")) as start:
        worker = start({**config, "park_max_publishes": "3"}, pool="prefork", concurrency=2)
        nowhere = task.apply_async((key, 1, 0.1), queue=f"nobody-{prefix}")
        unknown = client_only.delay(key)
        # A worker that receives a task name it does not know stores Celery's own
        # FAILURE (NotRegistered) for each copy; the final state is ParkUnclaimed.
        # A fresh AsyncResult per look: a ready one caches its first answer.
        for r in (nowhere, unknown):
            wait_for(
                lambda r=r: isinstance(app.AsyncResult(r.id).result, ParkUnclaimed),
                60,
                message="given up",
            )
            final = app.AsyncResult(r.id)
            assert final.state == "FAILURE" and "published 3 times" in str(final.result)
        after = [task.delay(key, n, 0.1) for n in range(2, 2 + LIMIT)]  # both slots free
        for r in after:
            r.get(timeout=60)
        assert parking(app, key).status().in_flight == 0
        log = worker.log_path.read_text(errors="replace")
        assert f"basic.parked[{nowhere.id}] was published 3 times" in log
        assert f"basic.client_only[{unknown.id}] was published 3 times" in log
    dropped = [s for s in app.recorder.signals() if s["signal"] == "redislock_dropped"]
    assert [(s["task_id"], s["reason"]) for s in dropped] == [(nowhere.id, "unclaimed")]
    client = app.recorder.client
    assert client.llen(f"nobody-{prefix}") == 3  # three publishes, then no more
    client.delete(f"nobody-{prefix}")
    assert_nothing_left(app, key)


def held_by(app: Any, key: str) -> list[Any]:
    """The holders of ``key`` as ``status`` shows them (reservations included)."""
    from celery_redislock.core.inspection import inspect_names

    client, settings = client_for(app)
    return list(inspect_names(client, settings.prefix, [f"park:{key}"])[0].holders)


def stated_holdings(app: Any) -> list[dict[str, list[str]]]:
    """What each live or dead process of this machine stated it holds, lock
    name -> owners (core/liveness.py)."""
    from celery_redislock.core import liveness

    client, settings = client_for(app)
    space = liveness.process_space()
    assert space is not None, "needs Linux /proc"
    holdings = []
    for raw in client.zrange(f"{settings.prefix}:{{live:{space}}}", 0, -1):
        record = client.get(f"{settings.prefix}:{{live:{space}}}:{raw.decode()}")
        holdings += [json.loads(record)] if record else []
    return holdings


def stated_names(app: Any) -> list[str]:
    """Lock names stated by live or dead processes of this machine (core/liveness.py)."""
    return [name for holding in stated_holdings(app) for name in holding]


def test_a_whole_worker_killed_gives_its_slots_back_before_their_ttl(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A worker SIGKILLed whole (main process and children) and restarted on the
    same machine: the restarted worker finds its predecessor's children dead
    (their pids gone) and gives their slots back at once, so the parked tasks
    start long before the leases' 30 s TTL would have freed them."""
    config = sweeping_config(redis_url)
    app = create_app(config)
    task = app.tasks["basic.parked"]
    client, _ = client_for(app)
    with worker_factory(tmp_path_factory.mktemp("park-dead-worker")) as start:
        first = start(config, pool="prefork", concurrency=4)
        fill_the_name(app, key)
        waiting = [task.delay(key, n, 0.1) for n in range(10, 10 + LIMIT)]
        wait_for(
            lambda: stated_names(app).count(f"park:{key}") == LIMIT,
            30,
            message="both holders stated",
        )
        from celery.bin.celery import celery as celery_main
        from click.testing import CliRunner

        out = (
            CliRunner()
            .invoke(
                celery_main,
                ["redislock", "--url", redis_url, "--prefix", config["prefix"], "status"],
                catch_exceptions=False,
            )
            .output
        )
        assert "ALIVE" in out and out.count("s ago") == LIMIT, out  # both holders' statements
        expiries = [
            score
            for _, score in client.zrange(
                f"{config['prefix']}:{{park:{key}}}:holders", 0, -1, withscores=True
            )
        ]
        first.kill()
        second = start(config, pool="prefork", concurrency=4)
        for r in waiting:
            r.get(timeout=60)
        seconds, micros = client.time()
        now_ms = seconds * 1000 + micros // 1000
        assert now_ms < min(expiries), "the dead holders' slots came back before their TTL"
        assert second.log_path.read_text(errors="replace").count("which died on this machine") == 2
        # The dead processes' statements are gone, and idle processes state nothing.
        wait_for(lambda: stated_names(app) == [], 30, message="no statement left")


def test_a_paused_main_process_never_costs_its_running_child_its_slot(
    redis_url: str, key: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The worker's main process is paused (SIGSTOP) while one child runs and
    another child dies: a second worker on the machine gives back the dead
    child's slot, and leaves the running child's slot alone."""
    config = sweeping_config(redis_url)
    app = create_app(config)
    task = app.tasks["basic.parked"]
    with worker_factory(tmp_path_factory.mktemp("park-paused-main")) as start:
        paused = start(config, pool="prefork", concurrency=2)
        fill_the_name(app, key)
        waiting = task.delay(key, 10, 0.1)
        wait_for(
            lambda: stated_names(app).count(f"park:{key}") == LIMIT,
            30,
            message="both holders stated",
        )
        doomed, alive = events(app, key, "start")
        os.kill(paused.pid, signal.SIGSTOP)
        try:
            os.kill(doomed["pid"], signal.SIGKILL)
            killed = {**doomed, "what": "end", "t": time.time()}  # its body ends here
            start(config, pool="prefork", concurrency=2)
            waiting.get(timeout=60)  # the dead child's slot came back
            holder_pids = [h.meta.get("pid") for h in held_by(app, key)]
            assert alive["pid"] in holder_pids, "the running child keeps its slot"
            ended = {e["id"] for e in events(app, key, "end")}
            assert alive["id"] not in ended, "and its body still runs"
        finally:
            os.kill(paused.pid, signal.SIGCONT)
        open_gate(app, key)
        AsyncResult(alive["id"], app=app).get(timeout=60)
    assert max_overlap([*events(app, key), killed]) <= LIMIT
