"""Part 4: Celery: task overhead, commands per task, heartbeat cost, crash clean-up.

A real ``celery worker`` subprocess (prefork, ``concurrency`` children) runs
``benchmarks.celery_app`` with Redis as broker and lock store
(``BENCH_BROKER_URL=amqp://...`` for a RabbitMQ broker instead).  Throughput:
``tasks`` no-op tasks are queued on a fresh queue, the worker is told to
consume it, and the rate is taken between the first and the last task's
completion stamps.  Commands: ``INFO commandstats`` over that window / tasks
(broker traffic included; calls made inside Lua scripts included).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery_redislock import HEARTBEAT, RedisLock

from . import common
from .worker import Worker, wait

ROOT = Path(__file__).resolve().parent.parent
# A plain task that also makes two bare round trips (PING) to Redis: what any
# acquire-before / release-after scheme costs at the least, Lua and Python aside.
CONTROL = "plain Task + 2 PINGs (control)"
# The per-call part (distinct keys, the caller timed too): each guarded kind
# beside the plain task that makes the same Redis round trips.  A LockedTask
# takes and gives back its lock in the worker (2 round trips); a park decides
# at the call, before the publish (1 more, in the caller).
CALL_CONTROL_LOCK = "control: plain + 1 PING before and after the body"
CALL_CONTROL_PARK = "control: plain + 1 PING in the caller + 2 in the worker"
CALL_LOCKED = "LockedTask, a key per call"
# The floors of the same round trips (benchmarks.floors): the least scripts that
# keep a lock's, and a park's, core guarantees, with no library code around them.
CALL_FLOOR_LOCK = "floor: plain + the guaranteed lock scripts around the body"
CALL_FLOOR_PARK = "floor: plain + the guarded park's scripts (1 in the caller, 2 in the worker)"
CALL_PARK = "SemaphoreTask (park), a key per call"


@dataclass(frozen=True)
class CeleryParams:
    runs: int = 5
    tasks: int = 2000
    calls: int = 1500  # per kind, in the per-call part
    concurrency: int = 2
    heartbeat_leases: int = 100
    heartbeat_ttl: float = 3.0  # renewal every ttl/3 = 1 s
    heartbeat_window: float = 6.0
    crash_give_up: float = 40.0  # ours: TTL 30 s + margin
    peer_watch: float = 10.0  # peers (TTL 3600 s / none): how long we watch before giving up
    peers_crash: bool = True


QUICK = CeleryParams(
    runs=1, tasks=300, calls=300, heartbeat_window=3.0, crash_give_up=10.0, peer_watch=3.0
)
TINY = CeleryParams(
    runs=1,
    tasks=20,
    calls=20,
    heartbeat_leases=10,
    heartbeat_ttl=0.6,
    heartbeat_window=1.0,
    crash_give_up=10.0,
    peers_crash=False,
)


# -- throughput -----------------------------------------------------------------


def _process_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _worker_cpu(main_pid: int) -> float | None:
    """CPU seconds used by a worker's main process and its pool children (Linux /proc)."""
    try:
        total = _process_cpu(main_pid)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError):
                    with open(f"/proc/{entry}/stat", "rb") as stat:
                        ppid = int(stat.read().rsplit(b")", 1)[1].split()[1])
                    if ppid == main_pid:
                        total += _process_cpu(int(entry))
        return total
    except OSError:
        return None  # no /proc: not reported


def _throughput_run(
    celery_app: Any, worker: Worker, task: Any, n: int, admin: Any
) -> dict[str, float | None]:
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    counter = f"bench:done:{queue}"
    with celery_app.producer_or_acquire() as producer:
        for i in range(n):
            task.apply_async((i, counter, n), queue=queue, producer=producer)
    common.reset_stats(admin)
    redis_cpu, worker_cpu = common.server_cpu(admin), _worker_cpu(worker.proc.pid)
    celery_app.control.add_consumer(queue, destination=[worker.name], reply=True, timeout=10)
    wait(lambda: admin.get(counter + ":last") is not None, 300, f"{n} {task.name} tasks")
    redis_cpu = common.server_cpu(admin) - redis_cpu
    worker_after = _worker_cpu(worker.proc.pid)
    calls = common.command_calls(admin)
    celery_app.control.cancel_consumer(queue, destination=[worker.name], reply=True, timeout=10)
    first = float(admin.get(counter + ":first"))
    last = float(admin.get(counter + ":last"))
    admin.delete(counter, counter + ":first", counter + ":last")
    return {
        "tasks_per_s": (n - 1) / max(last - first, 1e-9),
        "server_cmds_per_task": sum(calls.values()) / n,
        "script_calls_per_task": common.script_calls(calls) / n,
        "redis_cpu_us": 1e6 * redis_cpu / n,
        "worker_cpu_us": None
        if worker_cpu is None or worker_after is None
        else 1e6 * (worker_after - worker_cpu) / n,
    }


def _calls_run(
    celery_app: Any,
    worker: Worker,
    task: Any,
    n: int,
    admin: Any,
    caller_pings: int,
    pinger: Any,
) -> dict[str, float | None]:
    """``n`` calls published while the worker consumes: calls per second from
    the first send to the last body, so what the caller pays counts too."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    counter = f"bench:done:{queue}"
    celery_app.control.add_consumer(queue, destination=[worker.name], reply=True, timeout=10)
    common.reset_stats(admin)
    redis_cpu, worker_cpu = common.server_cpu(admin), _worker_cpu(worker.proc.pid)
    caller_cpu = time.process_time()
    first_send = time.time()
    with celery_app.producer_or_acquire() as producer:
        for i in range(n):
            for _ in range(caller_pings):
                pinger.ping()
            task.apply_async((i, counter, n), queue=queue, producer=producer)
    caller_cpu = time.process_time() - caller_cpu
    wait(lambda: admin.get(counter + ":last") is not None, 300, f"{n} {task.name} calls")
    redis_cpu = common.server_cpu(admin) - redis_cpu
    worker_after = _worker_cpu(worker.proc.pid)
    calls = common.command_calls(admin)
    celery_app.control.cancel_consumer(queue, destination=[worker.name], reply=True, timeout=10)
    last = float(admin.get(counter + ":last"))
    admin.delete(counter, counter + ":first", counter + ":last")
    return {
        "calls_per_s": n / max(last - first_send, 1e-9),
        "server_cmds_per_task": sum(calls.values()) / n,
        "script_calls_per_task": common.script_calls(calls) / n,
        "redis_cpu_us": 1e6 * redis_cpu / n,
        # the publishing loop only (this process also waits and polls after it)
        "caller_cpu_us": 1e6 * caller_cpu / n,
        "worker_cpu_us": None
        if worker_cpu is None or worker_after is None
        else 1e6 * (worker_after - worker_cpu) / n,
    }


def per_call(
    url: str, worker: Worker, params: CeleryParams, admin: Any, bench_app: Any, log: Any
) -> dict[str, Any]:
    """Each guarded kind and its control, a key per call, interleaved runs."""
    celery_app, pinger = bench_app.app, common.client(url)
    variants = {  # name: (task, PINGs the caller sends before each publish)
        "plain Task": (bench_app.plain, 0),
        CALL_CONTROL_LOCK: (bench_app.two_pings, 0),
        CALL_FLOOR_LOCK: (bench_app.floor_locked, 0),
        CALL_LOCKED: (bench_app.locked, 0),
        CALL_CONTROL_PARK: (bench_app.two_pings, 1),
        CALL_FLOOR_PARK: (bench_app.floor_park_sender, 0),
        CALL_PARK: (bench_app.sem_one, 0),
    }
    for task, pings in variants.values():  # warm up
        _calls_run(celery_app, worker, task, max(20, params.calls // 10), admin, pings, pinger)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(params.runs):
        for name, (task, pings) in variants.items():
            log(f"  celery: {params.calls} calls of {name}")
            runs[name].append(
                _calls_run(celery_app, worker, task, params.calls, admin, pings, pinger)
            )
    rows = {name: common.median_of_runs(r) for name, r in runs.items()}

    def ratio(kind: str, base: str) -> float:
        return float(rows[kind]["calls_per_s"] / rows[base]["calls_per_s"])

    return {
        "rows": rows,
        "locked_vs_control": ratio(CALL_LOCKED, CALL_CONTROL_LOCK),
        "park_vs_control": ratio(CALL_PARK, CALL_CONTROL_PARK),
        "floor_lock_vs_control": ratio(CALL_FLOOR_LOCK, CALL_CONTROL_LOCK),
        "floor_park_vs_control": ratio(CALL_FLOOR_PARK, CALL_CONTROL_PARK),
        "locked_vs_floor": ratio(CALL_LOCKED, CALL_FLOOR_LOCK),
        "park_vs_floor": ratio(CALL_PARK, CALL_FLOOR_PARK),
    }


# -- heartbeat -------------------------------------------------------------------


def heartbeat_cost(url: str, params: CeleryParams, admin: Any) -> dict[str, Any]:
    """Hold ``heartbeat_leases`` locks in this process; count renewal calls in a window."""
    conn = common.client(url)
    tag = uuid.uuid4().hex[:8]
    leases = [
        RedisLock(conn, f"hb-{tag}-{i}", ttl=params.heartbeat_ttl, prefix="bench")
        for i in range(params.heartbeat_leases)
    ]
    for lease in leases:
        lease.acquire()
    try:
        # Count from just after one beat to just after the k-th beat after it,
        # so every renewal call in the window belongs to a counted beat.
        k = max(1, round(params.heartbeat_window / (params.heartbeat_ttl / 3)))
        first = HEARTBEAT.beats
        wait(lambda: HEARTBEAT.beats > first, 3 * params.heartbeat_ttl, "a heartbeat", 0.002)
        common.reset_stats(admin)
        sent0, beats0, started = common.sent_commands(), HEARTBEAT.beats, time.monotonic()
        wait(
            lambda: HEARTBEAT.beats >= beats0 + k, 3 * params.heartbeat_window, "heartbeats", 0.002
        )
        calls = common.command_calls(admin)
        sent, beats = common.sent_commands() - sent0, HEARTBEAT.beats - beats0
        window = time.monotonic() - started
        lost = sum(not lease.owned() for lease in leases)
    finally:
        for lease in leases:
            with contextlib.suppress(Exception):
                lease.release()
    interval = params.heartbeat_ttl / 3
    refreshes = common.script_calls(calls)
    return {
        "leases": params.heartbeat_leases,
        "ttl_s": params.heartbeat_ttl,
        "interval_s": interval,
        "window_s": window,
        "refresh_calls": refreshes,
        "client_commands": sent,
        "calls_per_interval": refreshes / (window / interval),
        "beats": beats,
        "calls_per_beat": refreshes / max(beats, 1),
        "lost": lost,
    }


# -- crash clean-up ------------------------------------------------------------------


def _crash(
    admin: Any,
    task: Any,
    arg: str,
    held: Any,
    give_up: float,
    ttl: float | None,
    what: str,
    ttl_left: Any,
) -> dict[str, Any]:
    pid_key = f"bench:crashpid:{arg}"
    admin.delete(pid_key)
    task.apply_async((arg,), queue="crash")
    wait(lambda: admin.get(pid_key) is not None and held(), 60, f"{task.name} to start")
    child = int(admin.get(pid_key))
    os.kill(child, signal.SIGKILL)
    killed = time.monotonic()
    deadline = killed + give_up
    while held() and time.monotonic() < deadline:
        time.sleep(0.01)
    result: dict[str, Any] = {"what": what, "ttl_s": ttl}
    if held():
        result.update(free_after_s=None, gave_up_after_s=give_up, ttl_left=ttl_left())
    else:
        result["free_after_s"] = time.monotonic() - killed
    return result


def _scan_one(admin: Any, pattern: str) -> Any:
    return next(iter(admin.scan_iter(match=pattern, count=1000)), None)


def crash_cleanup(celery_app: Any, params: CeleryParams, admin: Any) -> dict[str, Any]:
    from . import celery_app as bench_app

    results: dict[str, Any] = {}
    task = bench_app.crash_ours
    ours = []
    for _ in range(params.runs):
        arg = "k" + uuid.uuid4().hex[:6]
        lease_set = task.redislock_leaseset(task.redislock_name((arg,), {}))
        ours.append(
            _crash(
                admin,
                task,
                arg,
                lambda ls=lease_set: bool(ls.holders()),
                params.crash_give_up,
                bench_app.CRASH_TTL,
                "taken when the task starts, renewed by the heartbeat",
                lambda: "-",
            )
        )
    freed = [r["free_after_s"] for r in ours if r["free_after_s"] is not None]
    row = dict(ours[0])
    if len(freed) == len(ours):
        row["free_after_s"] = common.median(freed)
    else:  # any run that was not freed in time is the row's result
        row = next(r for r in ours if r["free_after_s"] is None)
    row["runs"] = ours
    results["celery-redislock LockedTask"] = row
    if not params.peers_crash:
        return results

    def key_ttl(pattern: str) -> Any:
        key = _scan_one(admin, pattern)
        if key is None:
            return "gone"
        ms = admin.pttl(key)
        return "no expiry" if ms < 0 else f"{ms / 1000:.0f} s"

    arg = "k" + uuid.uuid4().hex[:6]
    once_pattern = f"qo_bench.crash_once_x-{arg}*"
    results["celery-once QueueOnce"] = _crash(
        admin,
        bench_app.crash_once,
        arg,
        lambda: _scan_one(admin, once_pattern) is not None,
        params.peer_watch,
        3600,
        "taken at enqueue, released after the task returns",
        lambda: key_ttl(once_pattern),
    )
    arg = "k" + uuid.uuid4().hex[:6]
    single_pattern = "SINGLETONLOCK_*"
    for key in admin.scan_iter(match=single_pattern):
        admin.delete(key)
    results["celery-singleton Singleton"] = _crash(
        admin,
        bench_app.crash_singleton,
        arg,
        lambda: _scan_one(admin, single_pattern) is not None,
        params.peer_watch,
        None,
        "taken at enqueue, released on success/failure in the child",
        lambda: key_ttl(single_pattern),
    )
    for pattern in (once_pattern, single_pattern):  # leave the server clean
        for key in admin.scan_iter(match=pattern):
            admin.delete(key)
    return results


# -- orchestration ---------------------------------------------------------------------


def run(url: str, params: CeleryParams, log: Any = print) -> dict[str, Any]:
    os.environ["BENCH_REDIS_URL"] = url  # before the app module reads it
    from . import celery_app as bench_app

    if url != bench_app.URL:
        raise RuntimeError("benchmarks.celery_app was imported with another Redis URL")
    admin = common.client(url)
    broker = bench_app.BROKER_URL.split(":", 1)[0]
    results: dict[str, Any] = {
        "params": params.__dict__,
        "broker": "RabbitMQ" if broker.startswith("amqp") else broker.capitalize(),
    }
    log("  celery: heartbeat cost")
    results["heartbeat"] = heartbeat_cost(url, params, admin)
    worker = Worker("benchmarks.celery_app", url, "ctl,crash", params.concurrency)
    try:
        worker.wait_ready()
        variants = {
            "plain Task": bench_app.plain,
            CONTROL: bench_app.two_pings,
            "LockedTask": bench_app.locked,
            "SemaphoreTask": bench_app.sem,
        }
        for task in variants.values():  # warm up every child and code path
            _throughput_run(bench_app.app, worker, task, max(20, params.tasks // 10), admin)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        for _ in range(params.runs):
            for name, task in variants.items():  # interleaved, so drift hits all alike
                log(f"  celery: {params.tasks} x {name}")
                runs[name].append(_throughput_run(bench_app.app, worker, task, params.tasks, admin))
        throughput = {name: common.median_of_runs(r) for name, r in runs.items()}
        base = throughput["plain Task"]["server_cmds_per_task"]
        for row in throughput.values():
            row["extra_cmds_per_task"] = row["server_cmds_per_task"] - base
        results["throughput"] = throughput
        results["calls"] = per_call(url, worker, params, admin, bench_app, log)
        log("  celery: SIGKILL of a worker child")
        results["crash"] = crash_cleanup(bench_app.app, params, admin)
    except Exception as exc:
        results["missing"] = f"{type(exc).__name__}: {exc}\nworker log:\n{worker.tail()}"
        raise
    finally:
        worker.stop()
    return results
