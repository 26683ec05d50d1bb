"""Part 1: lock micro-benchmarks (uncontended speed, hand-off, fairness, commands).

Every scenario runs in spawned processes of one :class:`~.common.Fleet`
against the same Redis; each contender gets a fresh lock name per run.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from dataclasses import dataclass
from typing import Any

from . import common
from .contenders import LOCKS


@dataclass(frozen=True)
class LockParams:
    runs: int = 3
    uncontended_s: float = 4.0  # per contender, in uncontended_slices interleaved slices
    uncontended_slices: int = 20
    handoff_waiters: int = 16
    handoff_s: float = 3.0
    fair_procs: int = 32
    fair_hold: float = 0.010
    fair_s: float = 4.0
    margin: float = 0.5  # time for workers to connect before a synchronised start
    crash: bool = True  # also measure what a SIGKILLed holder leaves behind


QUICK = LockParams(
    runs=1,
    uncontended_s=0.5,
    uncontended_slices=5,
    handoff_waiters=4,
    handoff_s=1.0,
    fair_procs=6,
    fair_s=1.0,
)
TINY = LockParams(
    runs=1,
    uncontended_s=0.2,
    uncontended_slices=2,
    handoff_waiters=2,
    handoff_s=0.2,
    fair_procs=3,
    fair_hold=0.002,
    fair_s=0.2,
    margin=0.3,
    crash=False,
)


# -- work done inside fleet workers ----------------------------------------------


def uncontended_worker(url: str, names: dict[str, str], seconds: float, slices: int) -> Any:
    """Every contender in turn, in ``slices`` short slices each, in this one process.

    Interleaving slices (and rotating who goes first) exposes all contenders
    to the same machine: a noisy neighbour or a CPU frequency change during
    the run hits them alike, so their ratio holds even when absolute numbers
    drift.  Redis command calls are counted per slice from ``INFO commandstats``,
    and Redis CPU time (user + system, I/O included) from ``INFO cpu``.
    """
    admin = common.client(url)
    locks = {c: LOCKS[c](common.client(url), name) for c, name in names.items()}
    totals = {
        c: {"cycles": 0, "elapsed": 0.0, "sent": 0, "server": 0, "server_cpu": 0.0} for c in locks
    }
    for lock in locks.values():  # warm up: connection, script loading
        lock.acquire()
        lock.release()
    order = list(locks)
    for i in range(slices):
        for contender in order[i % len(order) :] + order[: i % len(order)]:
            lock, row = locks[contender], totals[contender]
            server0 = sum(common.command_calls(admin).values())
            cpu0 = common.server_cpu(admin)
            sent0 = common.sent_commands()
            cycles = 0
            started = time.perf_counter()
            end = started + seconds / slices
            while time.perf_counter() < end:
                lock.acquire()
                lock.release()
                cycles += 1
            row["elapsed"] += time.perf_counter() - started
            row["sent"] += common.sent_commands() - sent0
            row["server_cpu"] += common.server_cpu(admin) - cpu0
            row["server"] += sum(common.command_calls(admin).values()) - server0
            row["cycles"] += cycles
    return {
        c: {
            "cycles_per_s": t["cycles"] / t["elapsed"],
            "client_cmds_per_acq": t["sent"] / max(t["cycles"], 1),
            "server_cmds_per_acq": t["server"] / max(t["cycles"], 1),
            "server_cpu_us": 1e6 * t["server_cpu"] / max(t["cycles"], 1),
        }
        for c, t in totals.items()
    }


def handoff_worker(
    url: str, contender: str, name: str, start_at: float, stop_at: float
) -> dict[str, Any]:
    """Acquire, note the hand-off delay since the previous holder's release, release, repeat.

    The previous release time and holder pid live in the fleet's shared array;
    only the lock holder touches them, so a correct lock needs no other guard.
    """
    values = common.shared().values
    me = float(common.pid())
    conn = common.client(url)
    lock = LOCKS[contender](conn, name)
    conn.ping()
    common.sleep_until(start_at)
    latencies: list[float] = []
    own = acquisitions = 0
    while time.monotonic() < stop_at:
        lock.acquire()
        now = time.monotonic()
        if values[0] > 0:
            if values[1] != me:
                latencies.append(now - values[0])
            else:
                own += 1
        acquisitions += 1
        values[1] = me
        values[0] = time.monotonic()
        lock.release()
    return {"latencies": latencies, "own": own, "acquisitions": acquisitions}


def fairness_worker(
    url: str, contender: str, name: str, hold: float, start_at: float, stop_at: float
) -> dict[str, Any]:
    conn = common.client(url)
    lock = LOCKS[contender](conn, name)
    conn.ping()
    common.sleep_until(start_at)
    sent0 = common.sent_commands()
    count = 0
    while time.monotonic() < stop_at or count == 0:  # a late starter still takes part
        lock.acquire()
        time.sleep(hold)
        lock.release()
        count += 1
    return {"count": count, "sent": common.sent_commands() - sent0}


# -- orchestration ------------------------------------------------------------------


def _name() -> str:
    return "lock-" + uuid.uuid4().hex[:12]


def run(url: str, params: LockParams, fleet: common.Fleet, log: Any = print) -> dict[str, Any]:
    """All lock scenarios for every contender; medians over ``params.runs``.

    Runs are interleaved (run 1 of every contender, then run 2, ...), so a
    change in machine load during the benchmark hits every contender alike.
    """
    admin = common.client(url)
    raw: dict[str, dict[str, list[Any]]] = {
        c: {"uncontended": [], "handoff": [], "fairness": []} for c in LOCKS
    }
    for run_no in range(params.runs):
        log(f"  locks: uncontended, every lock in turn (run {run_no + 1}/{params.runs})")
        names = {contender: _name() for contender in raw}
        (res,) = fleet.run(
            uncontended_worker, [(url, names, params.uncontended_s, params.uncontended_slices)]
        )
        for contender, rows in raw.items():
            rows["uncontended"].append(res[contender])
        for contender, rows in raw.items():
            log(f"  locks: {contender} (run {run_no + 1}/{params.runs})")
            rows["handoff"].append(_handoff_run(url, contender, params, fleet))
            rows["fairness"].append(_fairness_run(url, contender, params, fleet, admin))
    results: dict[str, Any] = {
        "params": params.__dict__,
        "contenders": {
            contender: {part: common.median_of_runs(runs) for part, runs in rows.items()}
            for contender, rows in raw.items()
        },
    }
    if params.crash:
        for contender, rows in results["contenders"].items():
            log(f"  locks: {contender}, holder SIGKILLed")
            rows["crash"] = left_behind(url, contender)
    return results


def _hold_until_killed(url: str, contender: str, name: str, ready: Any) -> None:
    lock = LOCKS[contender](common.client(url), name, None)  # the library's default TTL
    lock.acquire()
    ready.set()
    time.sleep(3600)


def left_behind(url: str, contender: str) -> dict[str, Any]:
    """SIGKILL a process holding the lock (library defaults); how long is it still held?

    ``expires_in_s`` is the longest remaining TTL among the lock's keys (our
    fencing counter excluded: it is not the lock), None when a key never expires.
    """
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    name = _name()
    proc = ctx.Process(target=_hold_until_killed, args=(url, contender, name, ready), daemon=True)
    proc.start()
    try:
        if not ready.wait(120):
            raise TimeoutError(f"{contender}: the holder did not acquire in 120 s")
    finally:
        proc.kill()
        proc.join(10)
    admin = common.client(url)
    keys = [k for k in admin.scan_iter(match=f"*{name}*") if not k.endswith(b":fence")]
    ttls = [admin.pttl(k) for k in keys]
    admin.delete(*keys) if keys else None
    forever = any(t == -1 for t in ttls)
    return {
        "held": bool(keys),
        "expires_in_s": None if forever or not ttls else max(ttls) / 1000,
        "never_expires": forever,
    }


def _handoff_run(url: str, contender: str, params: LockParams, fleet: common.Fleet) -> Any:
    name = _name()
    start = common.start_time(params.margin)
    stop = start + params.handoff_s
    n = params.handoff_waiters + 1  # one holder and 16 waiting behind it
    out = fleet.run(handoff_worker, [(url, contender, name, start, stop)] * n)
    latencies = [x for r in out for x in r["latencies"]]
    acquisitions = sum(r["acquisitions"] for r in out)
    return {
        "p50_ms": common.percentile(latencies, 0.50) * 1000,
        "p99_ms": common.percentile(latencies, 0.99) * 1000,
        "handoffs": len(latencies),
        "self_reacquire_pct": 100 * sum(r["own"] for r in out) / max(acquisitions, 1),
    }


def _fairness_run(
    url: str, contender: str, params: LockParams, fleet: common.Fleet, admin: Any
) -> Any:
    name = _name()
    common.reset_stats(admin)
    start = common.start_time(params.margin)
    stop = start + params.fair_s
    n = params.fair_procs
    out = fleet.run(fairness_worker, [(url, contender, name, params.fair_hold, start, stop)] * n)
    server = sum(common.command_calls(admin).values())
    counts = [r["count"] for r in out]
    total = sum(counts)
    mean = total / n
    return {
        "total": total,
        "per_s": total / params.fair_s,
        "min": min(counts),
        "max": max(counts),
        "min_over_mean": min(counts) / mean if mean else 0.0,
        "client_cmds_per_acq": sum(r["sent"] for r in out) / max(total, 1),
        "server_cmds_per_acq": server / max(total, 1),
    }
