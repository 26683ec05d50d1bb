"""Property 6: the task base classes under SIGKILL of pool children and of whole workers.

Two ``celery worker`` processes (prefork, 2 children each; real
subprocesses, ``tests/celery_harness.py``) run a batch of ``LockedTask``
(3 keys) and ``SemaphoreTask`` (1 key, limit 2) tasks of 0.1-0.6 s, sent
in a steady stream, while
the injector, drawing from the seed, SIGKILLs a child that is inside a body,
or the whole worker (main process and children; a new worker is started in
its place).  Then every task must end SUCCESS (acks_late and
reject_on_worker_lost redeliver what was killed), no key may have been run
by more bodies at once than its limit (from the bodies' own records; a body
killed midway ends at its kill), and no lock keys may be left behind.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
from collections import defaultdict
from pathlib import Path
from random import Random
from typing import Any

import redis

from celery_redislock.testing.servers import RedisServer
from tests.celery_harness import WorkerProcess
from tests.kombu_restore import restore_cadence

from .celery_app import SEMAPHORE_LIMIT, create_app
from .checker import Row
from .history import Recorder, load

LOCK_KEYS = ("k0", "k1", "k2")
SEM_KEYS = ("s0",)


def run_celery(
    seed: int, seconds: float, backlog: int, ttl: float, logdir: Path, broker: str | None = None
) -> tuple[Row, dict[str, int]]:
    """Property 6 with the broker at ``broker`` (an amqp:// URL), or, by
    default, with the Redis under test as the broker too."""
    rng = Random(seed)
    injected = {"child_kill": 0, "worker_kill": 0}
    with RedisServer() as recording, RedisServer() as under_test:
        rec_client = redis.Redis.from_url(recording.url, socket_timeout=30)
        rec = Recorder(rec_client, "inj")
        config = {
            "redis": under_test.url,
            "broker": broker or under_test.url,
            "rec": recording.url,
            "prefix": f"cfaults-{rng.randrange(16**8):08x}",
            "ttl": str(ttl),
            "visibility": "6",
        }
        app = create_app(config)
        workers: list[WorkerProcess] = []
        started = 0

        def start_worker() -> None:
            nonlocal started
            worker = WorkerProcess(
                config,
                logdir / f"worker-{started}.log",
                module="tests.faults.celery_app",
                pool="prefork",
                concurrency=2,
            )
            started += 1
            workers.append(worker.start())

        try:
            start_worker()
            start_worker()
            results: list[Any] = []
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                # keep a backlog, so that bodies are always running when a kill lands
                outstanding = sum(1 for r in results[-4 * backlog :] if not r.ready())
                for _ in range(backlog - outstanding):
                    if rng.random() < 0.6:
                        task, key = app.tasks["faults.locked"], rng.choice(LOCK_KEYS)
                    else:
                        task, key = app.tasks["faults.limited"], rng.choice(SEM_KEYS)
                    results.append(task.delay(key, len(results), rng.uniform(0.1, 0.6)))
                time.sleep(rng.uniform(0.2, 1.0))
                _inject(rng, rec, rec_client, workers, start_worker, injected)
            rec("phase", name="celery-calm")
            # > visibility timeout + the transport's restore cadence (kombu_restore)
            wait_until = time.monotonic() + 40 + (0 if broker else restore_cadence())
            while time.monotonic() < wait_until and not all(r.ready() for r in results):
                time.sleep(0.2)
            states: dict[str, int] = defaultdict(int)
            for r in results:
                states[r.state] += 1
            unfinished = [r.id for r in results if not r.ready()]
            vanished = [] if broker else _vanished(under_test.url, unfinished, config["prefix"])
            task_ids = [r.id for r in results]
            results.clear()  # unsubscribe from the result store while it still runs
            gc.collect()
            app.close()
            for worker in workers:
                worker.stop()
            leftovers = _leftover_keys(under_test.url, config["prefix"], ttl + 10)
        finally:
            for worker in workers:
                worker.kill()
            if broker:
                _delete_queue(app, f"q-{config['prefix']}")
        events = load(rec_client)
        rec_client.close()
    row = check_celery(events, task_ids, states, vanished, injected["worker_kill"])
    row.title += " (RabbitMQ broker)" if broker else " (Redis broker)"
    row.figures = {f"{k}_{'amqp' if broker else 'redis'}": v for k, v in row.figures.items()}
    row.faults = sum(injected.values())
    if leftovers:
        row.violations.append(f"lock keys left after all tasks ended: {leftovers}")
    return row, injected


def _leftover_keys(url: str, prefix: str, timeout: float) -> list[str]:
    """Lock keys (not fence counters or token fates) still there after ``timeout`` s."""
    client: Any = redis.Redis.from_url(url)
    deadline = time.monotonic() + timeout
    while True:
        keys = [k.decode() for k in client.scan_iter(f"{prefix}:*")]
        # Fence counters expire after 10 minutes, token fates after 7 days (docs/park.md).
        keys = [k for k in keys if not k.endswith((":fence", ":tokens"))]
        if not keys or time.monotonic() > deadline:
            client.close()
            return keys
        time.sleep(0.2)


def _delete_queue(app: Any, name: str) -> None:
    with contextlib.suppress(Exception), app.connection_for_write() as conn:
        conn.default_channel.queue_delete(name)


def _inject(
    rng: Random,
    rec: Recorder,
    rec_client: Any,
    workers: list[WorkerProcess],
    start_worker: Any,
    injected: dict[str, int],
) -> None:
    """SIGKILL a child inside a body (2/3 of the time) or a whole worker with
    a body running; waits up to 5 s for a body to be running."""
    whole = rng.random() >= 2 / 3
    deadline = time.monotonic() + 5
    targets: list[tuple[int, WorkerProcess]] = []
    while not targets and time.monotonic() < deadline:
        running = _running_bodies(rec_client)
        targets = sorted(
            ((pid, w) for w in workers if w.alive() for pid in w.children() if pid in running),
            key=lambda t: t[0],
        )
        time.sleep(0.05)
    if not targets:
        return
    pid, worker = rng.choice(targets)
    kind = "worker_kill" if whole else "child_kill"
    pids = [worker.pid, *worker.children()] if whole else [pid]
    rec("fault", kind=kind, at="start", fid=-1, pids=pids)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if whole:
            os.killpg(worker.pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    # Marked as soon as the signal is sent: a killed body runs no later than
    # this, and ending its interval at the "end" mark below (after the waits)
    # made a body that the dead-holder path let start meanwhile look like an
    # overlap on a loaded machine.
    rec("fault", kind=kind, at="killed", fid=-1, pids=pids)
    if whole:
        worker.kill()  # reaps the main process
    _wait_gone(pids)
    rec("fault", kind=kind, at="end", fid=-1, pids=pids)
    injected[kind] += 1
    if whole:
        workers.remove(worker)
        start_worker()


def _vanished(url: str, task_ids: list[str], prefix: str) -> list[str]:
    """Unfinished tasks whose message is neither queued nor unacked in the
    Redis transport: popped by a worker that was killed before it recorded
    the message as unacked (kombu pops first, then writes ``unacked``; see
    celery/celery#7950).  With every worker still running, nothing else can
    hold a message of an unfinished acks_late task."""
    client: Any = redis.Redis.from_url(url)
    queue = [raw.decode() for raw in client.lrange(f"q-{prefix}", 0, -1)]
    unacked = [v.decode() for v in client.hgetall("unacked").values()]
    client.close()
    return [i for i in task_ids if not any(i in m for m in queue + unacked)]


def _running_bodies(rec_client: Any) -> set[int]:
    open_pids: dict[int, int] = defaultdict(int)
    for e in load(rec_client):
        if e["e"] == "body_start":
            open_pids[e["pid"]] += 1
        elif e["e"] == "body_end":
            open_pids[e["pid"]] -= 1
    return {pid for pid, n in open_pids.items() if n > 0}


def _wait_gone(pids: list[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if _zombie(pid):
                break
            time.sleep(0.01)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def check_celery(
    events: list[dict[str, Any]],
    results_ids: list[str],
    states: dict[str, int],
    vanished: list[str],
    worker_kills: int,
) -> Row:
    """``vanished``: unfinished tasks whose broker message is gone; accepted
    (and reported) as lost by the transport in a worker SIGKILL, at most one
    per whole-worker kill."""
    row = Row("6. Celery: no key run by two bodies at once; every task ends SUCCESS")
    killed_at: dict[int, float] = {}
    for e in events:
        if e["e"] == "fault" and e["at"] in ("killed", "end"):
            for pid in e["pids"]:
                killed_at.setdefault(pid, e["t"])  # "killed" comes first
    intervals: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    opened: dict[tuple[int, int], dict[str, Any]] = {}
    completed: dict[str, int] = defaultdict(int)
    history_end = events[-1]["t"] if events else 0.0
    for e in events:
        if e["e"] == "body_start":
            opened[(e["pid"], e["n"])] = e
        elif e["e"] == "body_end":
            start = opened.pop((e["pid"], e["n"]))
            intervals[e["r"]].append((start["t"], e["t"], e["id"]))
            completed[e["id"]] += 1
    for (pid, _), start in opened.items():
        end = killed_at.get(pid)
        if end is None:
            row.violations.append(
                f"body of task {start['id']} in pid {pid} never ended and was not killed"
            )
            end = history_end
        intervals[start["r"]].append((start["t"], end, start["id"]))
    for name, ivs in intervals.items():
        limit = SEMAPHORE_LIMIT if name.startswith("sem:") else 1
        points = sorted([(s, 1) for s, _, _ in ivs] + [(e, -1) for _, e, _ in ivs])
        active = 0
        for t, step in points:
            active += step
            if active > limit:
                row.violations.append(f"{name}: {active} bodies at once at {t:.3f} (limit {limit})")
        row.ops += len(ivs)
    excused = set(vanished) if len(vanished) <= worker_kills else set()
    not_done = [i for i in results_ids if not completed.get(i) and i not in excused]
    if not_done:
        row.violations.append(f"{len(not_done)} tasks never completed a body: {not_done[:5]}")
    if states.get("SUCCESS", 0) + len(excused) != len(results_ids):
        row.violations.append(f"final task states: {dict(states)}")
    if vanished:
        row.notes.append(
            f"{len(vanished)} tasks left in their last state because the Redis transport "
            f"lost their message in a worker SIGKILL (celery/celery#7950; at most one per "
            f"kill: {worker_kills} kills)"
        )
    reruns = sum(1 for ivs in intervals.values() for _ in ivs) - len(results_ids)
    # crash recovery: from the kill of a body to the next body of its key
    kinds = {pid: e["kind"] for e in events if e["e"] == "fault" for pid in e["pids"]}
    worst: dict[str, float] = {}
    for (pid, _), start in opened.items():
        if pid not in killed_at:
            continue
        later = [s for s, _, _ in intervals[start["r"]] if s > killed_at[pid]]
        if later:
            kind = kinds[pid]
            worst[kind] = max(worst.get(kind, 0.0), min(later) - killed_at[pid])
            row.figures[f"celery_{kind}_recovery"] = worst[kind]
    row.notes.append(
        f"{len(results_ids)} tasks, states {dict(states)}; {row.ops} bodies "
        f"({len(opened)} killed midway, {reruns} re-executions after kills)"
    )
    for kind, delay in sorted(worst.items()):
        row.notes.append(f"next body on the key of a {kind} victim within {delay:.2f} s")
    return row
