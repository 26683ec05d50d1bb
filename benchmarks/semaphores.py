"""Part 2: semaphores: acquire+release throughput and the highest concurrency seen.

Each client loops: one acquire attempt; on success it counts itself in, in a
cross-process counter (fleet lock), holds ``hold`` seconds, counts itself out
and releases; on refusal it sleeps 1 ms (the book's polling interval) and
tries again.  Counting in happens after acquire returns and counting out
before release starts, so the counter never exceeds the number of clients
that *believe* they hold a slot at once: any maximum above ``limit`` is a
real over-limit incident of that contender.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from . import common
from .contenders import CHECKS, SEMAPHORES

CURRENT, HIGHEST = 2, 3  # slots of the fleet's shared array


@dataclass(frozen=True)
class SemaphoreParams:
    runs: int = 3
    limit: int = 5
    hold: float = 0.001
    clients: tuple[int, ...] = (1, 32)
    seconds: float = 2.0
    margin: float = 0.5


QUICK = SemaphoreParams(runs=1, clients=(1, 6), seconds=0.7)
TINY = SemaphoreParams(runs=1, limit=2, clients=(1, 3), seconds=0.2, margin=0.3)


def semaphore_worker(
    url: str,
    contender: str,
    name: str,
    limit: int,
    hold: float,
    start_at: float,
    stop_at: float,
) -> dict[str, Any]:
    fleet_shared = common.shared()
    values = fleet_shared.values
    conn = common.client(url)
    sem = {**SEMAPHORES, **CHECKS}[contender](conn, name, limit)
    conn.ping()
    common.sleep_until(start_at)
    ops = refused = lost = 0
    sent0 = common.sent_commands()
    while time.monotonic() < stop_at or (ops == 0 and time.monotonic() < stop_at + 5):
        if not sem.acquire():
            refused += 1
            time.sleep(0.001)
            continue
        with fleet_shared.lock:
            values[CURRENT] += 1
            values[HIGHEST] = max(values[HIGHEST], values[CURRENT])
        if hold:
            time.sleep(hold)
        with fleet_shared.lock:
            values[CURRENT] -= 1
        if not sem.release():
            lost += 1
        ops += 1
    return {"ops": ops, "refused": refused, "lost": lost, "sent": common.sent_commands() - sent0}


def measure(
    url: str, contender: str, clients: int, params: SemaphoreParams, fleet: common.Fleet
) -> dict[str, Any]:
    """One run of ``clients`` processes; ``max_concurrency`` is the highest count seen."""
    name = "sem-" + uuid.uuid4().hex[:12]
    start = common.start_time(params.margin)
    stop = start + params.seconds
    hold = params.hold if clients > 1 else 0.0
    args = (url, contender, name, params.limit, hold, start, stop)
    out = fleet.run(semaphore_worker, [args] * clients)
    highest = int(fleet.shared.values[HIGHEST])
    ops = sum(r["ops"] for r in out)
    return {
        "ops_per_s": ops / params.seconds,
        "max_concurrency": highest,
        "over_limit": highest > params.limit,
        "refused": sum(r["refused"] for r in out),
        "lost_at_release": sum(r["lost"] for r in out),
        "client_cmds_per_op": sum(r["sent"] for r in out) / max(ops, 1),
    }


def run(url: str, params: SemaphoreParams, fleet: common.Fleet, log: Any = print) -> dict[str, Any]:
    """Every contender at every client count; runs interleaved across contenders."""
    raw: dict[str, dict[int, list[dict[str, Any]]]] = {
        c: {n: [] for n in params.clients} for c in SEMAPHORES
    }
    for run_no in range(params.runs):
        for contender, by_clients in raw.items():
            log(f"  semaphores: {contender} (run {run_no + 1}/{params.runs})")
            for clients, runs in by_clients.items():
                runs.append(measure(url, contender, clients, params, fleet))
    results: dict[str, Any] = {"params": params.__dict__, "contenders": {}}
    for contender, by_clients in raw.items():
        rows: dict[str, Any] = {}
        for clients, runs in by_clients.items():
            row = common.median_of_runs(runs)
            # one over-limit incident in any run fails the contender
            row["max_concurrency"] = max(r["max_concurrency"] for r in runs)
            row["over_limit"] = any(r["over_limit"] for r in runs)
            rows[str(clients)] = row
        results["contenders"][contender] = rows
    return results
