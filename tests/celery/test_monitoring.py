"""Every state true and visible where users look, on real workers.

* The result backend only moves forward: stampedes of ``keep_latest`` calls
  and of trailing ``lock_throttle`` calls, from several producer processes
  (one through ``send_task``), leave no call ``PARKED`` once the runs are
  over, and every ``superseded_by`` chain reaches a call that ran; on the
  Redis result backend and on a database one (SQLAlchemy, SQLite).
* Celery's event stream tells the same story: a consumer built on
  ``celery.events.state.State`` (what Flower and the Prometheus exporters
  build on) ends every call of a mixed scenario (skip, park and promote,
  ``keep_latest`` replace, throttle, retry requeue, revoked parked task,
  Celery's own revoke of a parked task and of a promoted run) in
  the state the result backend holds, with the task's name; requeues count
  as retries there.
* Flower's own HTTP API shows the same (skips, naming ``pip install flower``,
  when Flower is not installed; ``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock.core.capacity import Capacity
from celery_redislock.parking import revoke
from tests.celery_apps.basic import env_from_config
from tests.celery_apps.monitoring import create_app
from tests.celery_harness import celery_worker_factory  # noqa: F401
from tests.waiting import wait_for

ONE_SLOT = Capacity.semaphore(1)

ROOT = Path(__file__).resolve().parents[2]
FINAL = {"SUCCESS", "FAILURE", "SUPERSEDED", "SKIPPED", "REVOKED"}


@pytest.fixture
def config(redis_url: str, prefix: str) -> dict[str, str]:
    return {"redis": redis_url, "prefix": prefix}


def ran(app: Celery, config: dict[str, str]) -> dict[str, int]:
    """The calls whose body started, with the retries the body saw."""
    client = redis.Redis.from_url(config["redis"])
    entries = (raw.decode().split() for raw in client.lrange(f"{config['prefix']}:runs", 0, -1))
    return {task_id: int(retries) for task_id, retries in entries}


def states(app: Celery, ids: list[str]) -> dict[str, tuple[str, Any]]:
    out = {}
    for task_id in ids:
        result = app.AsyncResult(task_id)
        out[task_id] = (result.state, result.info)
    return out


def all_final(app: Celery, ids: list[str]) -> dict[str, tuple[str, Any]]:
    """The states of ``ids`` once every one of them is final (120 s at most)."""

    def settled() -> dict[str, tuple[str, Any]]:
        now = states(app, ids)
        return now if all(state in FINAL for state, _ in now.values()) else {}

    return wait_for(settled, 120, 0.2, "every call in a final state")


# -- the result backend only moves forward -----------------------------------------

PRODUCER = """
import sys, json
from tests.celery_apps.basic import env_from_config
from tests.celery_apps.monitoring import create_app
config, task, count, by_name = json.loads(sys.argv[1])
app = create_app(config)
ids = []
for n in range(count):
    if by_name:
        ids.append(app.send_task(task, ("stampede",)).id)
    else:
        ids.append(app.tasks[task].delay("stampede").id)
print(json.dumps(ids))
"""


def stampede(config: dict[str, str], task: str, producers: int, each: int) -> list[str]:
    """``producers`` processes send ``each`` calls of ``task`` at once (the last
    one through ``send_task``); the task ids, in no particular order."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for n in range(producers):
        argument = json.dumps([config, task, each, n == producers - 1])
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", PRODUCER, argument],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    ids: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        ids += json.loads(out)
    return ids


@pytest.mark.parametrize("backend", ["redis", "database"])
@pytest.mark.parametrize("task", ["mon.rebuild", "mon.trailing"])
def test_a_stampede_leaves_no_call_behind_its_real_state(
    config: dict[str, str],
    celery_worker_factory: Any,  # noqa: F811
    tmp_path: Path,
    backend: str,
    task: str,
) -> None:
    if backend == "database":
        pytest.importorskip("sqlalchemy", reason="pip install sqlalchemy (in the [test] extra)")
        config = {**config, "backend": f"db+sqlite:///{tmp_path / 'results.sqlite'}"}
    app = create_app(config)
    celery_worker_factory(config, module="tests.celery_apps.monitoring", concurrency=2)
    ids = stampede(config, task, producers=4, each=25)
    assert len(set(ids)) == 100
    final = all_final(app, ids)
    runs = ran(app, config)
    assert {state for state, _ in final.values()} <= {"SUCCESS", "SUPERSEDED"}, final
    assert all(final[task_id][0] == "SUCCESS" for task_id in runs if task_id in final)
    for task_id, (state, info) in final.items():
        seen = [task_id]
        while state == "SUPERSEDED":  # each chain ends at a call that ran
            task_id = info["superseded_by"]
            assert task_id not in seen, f"a superseded_by cycle: {seen}"
            seen.append(task_id)
            state, info = final.get(task_id) or states(app, [task_id])[task_id]
        assert state == "SUCCESS" and task_id in runs, seen


# -- Celery's event stream ---------------------------------------------------------


class Monitor:
    """A consumer of Celery's events built on ``celery.events.state.State``."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.state = app.events.State()
        self.receiver: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.app.connection_for_read() as connection:
            self.receiver = self.app.events.Receiver(connection, handlers={"*": self.state.event})
            self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def __enter__(self) -> Monitor:
        self.thread.start()
        probe = uuid.uuid4().hex  # listening once an event sent now arrives
        deadline = time.monotonic() + 30
        while probe not in self.state.tasks:
            assert time.monotonic() < deadline, "the event receiver never started"
            with self.app.events.default_dispatcher() as dispatcher:
                dispatcher.send("task-sent", uuid=probe, name="probe")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.thread.join(10)

    def seen(self, task_id: str) -> tuple[str | None, str | None, int | None]:
        task = self.state.tasks.get(task_id)
        return (None, None, None) if task is None else (task.state, task.name, task.retries)


def wait_for_or_false(condition: Any, timeout: float) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def running(app: Celery, config: dict[str, str], count: int) -> None:
    wait_for(lambda: len(ran(app, config)) >= count, 30, 0.02, f"{count} bodies started")


def mixed_scenario(app: Celery, config: dict[str, str]) -> dict[str, str]:
    """Every kind of call the library decides; returns task id -> task name."""
    calls: dict[str, str] = {}

    def call(name: str, *args: Any) -> Any:
        result = app.tasks[name].delay(*args)
        calls[result.id] = name
        return result

    call("mon.skipping", "a", 1.5)  # runs
    running(app, config, 1)
    call("mon.skipping", "a", 0.0)  # SKIPPED
    call("mon.rebuild", "b", 1.5)  # runs
    running(app, config, 2)
    for _ in range(3):  # the first two are SUPERSEDED, the last runs
        call("mon.rebuild", "b", 0.0)
    for _ in range(3):  # parked, then promoted one by one
        call("mon.capped", "c", 0.2)
    for _ in range(4):  # the first and the trailing call run, the others are superseded
        call("mon.trailing", "d", 0.0)
    requeued = call("mon.requeued", "e", 1.0)
    wait_for(lambda: requeued.id in ran(app, config), 30, 0.02, "the first requeued body")
    calls_before = set(calls)
    again = call("mon.requeued", "e", 0.0)  # requeued (RETRY) until the first ends
    assert again.id not in calls_before
    wait_for(
        lambda: any(i for i in ran(app, config) if calls[i] == "mon.capped"),
        30,
        0.02,
        "a capped body",
    )
    held = call("mon.capped", "f", 2.0)  # runs
    wait_for(lambda: held.id in ran(app, config), 30, 0.02, "the f holder")
    dropped = call("mon.capped", "f", 0.0)  # parked, then revoked: never runs
    wait_for(lambda: app.AsyncResult(dropped.id).state == "PARKED", 30, 0.02, "f parked")
    revoke(app, dropped.id, "cap:f")
    # Celery's own revoke, which the park does not see: its worker refuses the
    # promoted message, or terminates the promoted run, and sends the event.
    held = call("mon.capped", "g", 2.0)  # runs
    wait_for(lambda: held.id in ran(app, config), 30, 0.02, "the g holder")
    refused = call("mon.capped", "g", 0.0)  # parked, revoked by Celery, promoted: never runs
    killed = call("mon.capped", "g", 60.0)  # parked, promoted, terminated while it runs
    wait_for(lambda: app.AsyncResult(killed.id).state == "PARKED", 30, 0.02, "g parked")
    assert app.control.revoke(refused.id, reply=True, timeout=5), "no worker took the revoke"
    wait_for(lambda: killed.id in ran(app, config), 60, 0.02, "the terminated body")
    assert app.control.revoke(killed.id, terminate=True, reply=True, timeout=5)
    return calls


def test_the_event_stream_ends_every_call_where_the_result_backend_does(
    config: dict[str, str],
    celery_worker_factory: Any,  # noqa: F811
) -> None:
    app = create_app(config)
    celery_worker_factory(
        config, module="tests.celery_apps.monitoring", concurrency=4, extra_args=("-E",)
    )
    with Monitor(app) as monitor:
        calls = mixed_scenario(app, config)
        ids = list(calls)
        final = all_final(app, ids)

        def in_step() -> bool:
            return all(monitor.seen(i)[:2] == (final[i][0], calls[i]) for i in ids)

        def report() -> str:
            return "\n".join(
                f"{i} {calls[i]}: backend {final[i][0]}, events {monitor.seen(i)}" for i in ids
            )

        if not wait_for_or_false(in_step, 60):
            raise AssertionError(f"the event state disagrees with the result backend:\n{report()}")
    kinds = {state for state, _ in final.values()}
    assert kinds == {"SUCCESS", "SKIPPED", "SUPERSEDED", "REVOKED"}, report()
    requeued = [i for i in ids if calls[i] == "mon.requeued"][-1]
    assert monitor.seen(requeued)[2] >= 1, report()  # a requeue is a retry to monitors
    assert ran(app, config)[requeued] == 0  # ... not to the body's own retry budget


# -- Flower ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def flower_json(port: int, path: str) -> Any:
    """GET Flower's ``path``; None on 404 (an unknown task)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


@pytest.fixture
def flower(config: dict[str, str], tmp_path: Path) -> Iterator[int]:
    """Flower (``celery flower``) watching the test app's events; its port."""
    if not _importable("flower"):
        pytest.skip("Flower is not installed: pip install flower (.ci/run installs it)")
    port = free_port()
    env = {**os.environ, **env_from_config(config), "FLOWER_UNAUTHENTICATED_API": "true"}
    env["PYTHONPATH"] = str(ROOT)
    log = (tmp_path / "flower.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.celery_apps.monitoring",
            "flower",
            f"--port={port}",
            "--address=127.0.0.1",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(lambda: _answers(port), 60, 0.2, "Flower to answer")
        yield port
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
        log.close()


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _answers(port: int) -> bool:
    try:
        return flower_json(port, "/api/workers?refresh=false") is not None
    except OSError:
        return False


def test_flower_shows_every_call_as_the_result_backend_does(
    config: dict[str, str],
    celery_worker_factory: Any,  # noqa: F811
    flower: int,
) -> None:
    app = create_app(config)
    celery_worker_factory(
        config, module="tests.celery_apps.monitoring", concurrency=4, extra_args=("-E",)
    )
    probe = uuid.uuid4().hex  # Flower is listening once an event sent now shows

    def listening() -> bool:
        with app.events.default_dispatcher() as dispatcher:
            dispatcher.send("task-sent", uuid=probe, name="probe")
        return flower_json(flower, f"/api/task/info/{probe}") is not None

    wait_for(listening, 60, 0.5, "Flower to receive events")
    calls = mixed_scenario(app, config)
    ids = list(calls)
    final = all_final(app, ids)

    def shown(task_id: str) -> tuple[str | None, str | None]:
        info = flower_json(flower, f"/api/task/info/{task_id}") or {}
        return info.get("state"), info.get("name")

    def in_step() -> bool:
        return all(shown(i) == (final[i][0], calls[i]) for i in ids)

    if not wait_for_or_false(in_step, 60):
        report = "\n".join(f"{i} {calls[i]}: {final[i][0]}, Flower {shown(i)}" for i in ids)
        raise AssertionError(f"Flower disagrees with the result backend:\n{report}")


# -- the state guard, step by step -------------------------------------------------

HOLD_AND_DIE = """
import os, signal, sys
import redis
from celery_redislock.core.park import Parking
url, prefix, name, task_id = sys.argv[1:]
Parking(redis.Redis.from_url(url), prefix, name).hold_state(task_id, "dead-writer", "", 5.0)
os.kill(os.getpid(), signal.SIGKILL)  # killed between taking the guard and writing
"""


def guarded_app(redis_url: str, prefix: str) -> Celery:
    app = Celery(f"guard-{uuid.uuid4().hex[:6]}", set_as_current=False)
    app.conf.update(broker_url=redis_url, result_backend=redis_url, redislock_prefix=prefix)
    return app


def test_a_late_parked_never_lands_over_a_newer_state(redis_url: str, prefix: str) -> None:
    from celery_redislock.core.park import ParkConfig, Parking
    from celery_redislock.parking.states import GUARD_TTL, PARKED, SUPERSEDED, store_state
    from celery_redislock.settings import client_for

    app = guarded_app(redis_url, prefix)
    parking = Parking(client_for(app)[0], prefix, "late")
    holder = parking.enqueue("holder", ONE_SLOT, "{}", 0, ParkConfig(deadline=5), "t")
    assert holder.token  # the slot is reserved: the next call parks
    parked = parking.enqueue("x", ONE_SLOT, "{}", 0, ParkConfig(deadline=5), "t")
    assert parked.count == 1 and parked.guard  # the script took x's guard for its PARKED
    # for as long as a guard taken in Python lasts (hold_state_guard.lua keeps its own copy)
    guard_ttl_ms = redis.Redis.from_url(redis_url).pttl(f"{prefix}:{{late}}:state:x")
    assert GUARD_TTL * 1000 - 1000 < guard_ttl_ms <= GUARD_TTL * 1000
    # as when another write held x's guard at enqueue: its PARKED asks for the guard itself
    parking.free_state("x", parked.guard)
    # x leaves the park (superseded by another caller) before its own PARKED is written
    parking.drop("x")
    assert store_state(app, "x", SUPERSEDED, {"superseded_by": "y"}, "late", "t")
    assert not store_state(app, "x", PARKED, {}, "late", "t", needs="parked")  # too late
    assert app.AsyncResult("x").state == SUPERSEDED
    # while the task is parked, its PARKED is written
    parked = parking.enqueue("z", ONE_SLOT, "{}", 0, ParkConfig(deadline=5), "t")
    assert parked.count == 1
    assert store_state(app, "z", PARKED, {}, "late", "t", needs="parked", guard=parked.guard)
    assert app.AsyncResult("z").state == PARKED
    assert parking.hold_state("z", "next-writer", "", 5) == 1  # the write gave the guard back


def test_a_writer_killed_holding_the_guard_only_delays_the_next_write(
    redis_url: str, prefix: str
) -> None:
    from celery_redislock.parking.states import SUPERSEDED, store_state

    app = guarded_app(redis_url, prefix)
    done = subprocess.run(
        [sys.executable, "-c", HOLD_AND_DIE, redis_url, prefix, "killed", "k1"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert done.returncode == -9  # it died holding the guard
    guard = f"{prefix}:{{killed}}:state:k1"
    assert redis.Redis.from_url(redis_url).get(guard) == b"dead-writer"
    assert store_state(app, "k1", SUPERSEDED, {"superseded_by": "k2"}, "killed", "t")
    assert app.AsyncResult("k1").state == SUPERSEDED  # written once the guard lapsed
    assert not redis.Redis.from_url(redis_url).exists(guard)  # and given back


PARK_AND_DIE = """
import os, signal, sys
import redis
from celery_redislock.core.capacity import Capacity
from celery_redislock.core.park import ParkConfig, Parking
url, prefix, name, task_id = sys.argv[1:]
parked = Parking(redis.Redis.from_url(url), prefix, name).enqueue(
    task_id, Capacity.semaphore(1), "{}", 0, ParkConfig(deadline=30), "t"
)
assert parked.guard, parked  # the park script took the guard for its PARKED
os.kill(os.getpid(), signal.SIGKILL)  # killed between the park script and the PARKED write
"""


def test_a_caller_killed_after_parking_only_delays_the_promoted_state(
    redis_url: str, prefix: str
) -> None:
    from celery_redislock.core.park import ParkConfig, Parking
    from celery_redislock.parking.states import PROMOTED, store_state
    from celery_redislock.settings import client_for

    app = guarded_app(redis_url, prefix)
    parking = Parking(client_for(app)[0], prefix, "parked-then-killed")
    config = ParkConfig(deadline=30)
    first = parking.enqueue("p0", ONE_SLOT, "{}", 0, config, "t")
    held = parking.claim("p0", str(first.token), "owner.0", 30, "{}", ONE_SLOT, "t")
    assert held.token > 0  # p0 runs: the next call parks
    done = subprocess.run(
        [sys.executable, "-c", PARK_AND_DIE, redis_url, prefix, "parked-then-killed", "p1"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert done.returncode == -9  # it died holding p1's guard, PARKED not written
    released, promotions = parking.release("owner.0", ONE_SLOT, config, "t")
    assert released and [(p.task_id, p.guard) for p in promotions] == [("p1", "")]
    promotion = promotions[0]
    meta = {"lock": parking.name, "token": promotion.token}
    # the guard is still the dead caller's: the write waits for it to lapse, then goes ahead
    assert store_state(app, "p1", PROMOTED, meta, parking, "t", needs="inflight")
    assert app.AsyncResult("p1").state == PROMOTED
    assert not redis.Redis.from_url(redis_url).exists(f"{prefix}:{{parked-then-killed}}:state:p1")


def test_a_promotion_written_after_its_task_left_flight_is_not_written(
    redis_url: str, prefix: str
) -> None:
    """A promoting script takes the state guard of the first task of its reply
    only: the others are written after the ones before them, when their task
    may have been claimed (by an older copy of its message) and run, so
    their PROMOTED checks, under the guard, that they are still in flight."""
    from celery_redislock.core.park import ParkConfig, Parking
    from celery_redislock.parking.states import PROMOTED, store_state
    from celery_redislock.settings import client_for

    app = guarded_app(redis_url, prefix)
    parking = Parking(client_for(app)[0], prefix, "batch")
    config, two = ParkConfig(deadline=30), Capacity.semaphore(2)
    running = [parking.enqueue(f"r{i}", two, "{}", 0, config, "t") for i in range(2)]
    for i, reserved in enumerate(running):
        assert parking.claim(f"r{i}", str(reserved.token), f"o{i}", 30, "{}", two, "t").token
    for task_id in ("b1", "b2"):
        parked = parking.enqueue(task_id, two, "{}", 0, config, "t")
        assert parked.count and parked.guard
        parking.free_state(task_id, parked.guard)  # as its PARKED write does
    for i in range(2):  # both slots freed without promoting: one promote fills both
        assert parking.client.zrem(parking.keys.holders, f"o{i}")
    promotions = parking.promote(two, config, "t")
    assert [p.task_id for p in promotions] == ["b1", "b2"]
    assert promotions[0].guard == f"p{promotions[0].token}" and promotions[1].guard == ""
    # b2's message is claimed before its promoter came to write its PROMOTED
    claimed = parking.claim("b2", str(promotions[1].token), "o-b2", 30, "{}", two, "t")
    assert claimed.token > 0
    meta = {"lock": parking.name, "token": promotions[1].token}
    assert not store_state(app, "b2", PROMOTED, meta, parking, "t", needs="inflight")
    assert app.AsyncResult("b2").state == "PENDING"
    first = {"lock": parking.name, "token": promotions[0].token}
    guard = promotions[0].guard
    assert store_state(app, "b1", PROMOTED, first, parking, "t", needs="inflight", guard=guard)
    assert app.AsyncResult("b1").state == PROMOTED
