"""Part ``backlog``: a skewed backlog under the ``retry``, ``wait`` and ``park`` policies.

The scenario of issue 15: one heavy account sends ``n`` tasks of 20 ms, then
``light_accounts`` light accounts send ``light_jobs`` each; ``SemaphoreTask``
with limit 5 per account; one prefork worker ``-c 8`` (a fresh one per
policy, so memory figures do not carry over).  Per policy:

1. the worker starts on an idle queue; its RSS (main + children) is the idle
   figure;
2. the heavy account enqueues its ``n`` tasks while nothing consumes: the
   broker queue length then is the number of heavy messages the broker holds,
   and the Redis ``used_memory`` delta per task is what a waiting task costs
   (parked in Redis under ``park``, a broker message otherwise);
3. the worker is told to consume, and the light accounts send theirs;
4. until every task ran, a sampler records the queue length and the worker's
   RSS; ``INFO commandstats`` over steps 2-4 gives Redis commands per task
   (broker traffic and calls inside Lua included; the benchmark's own
   completion ``INCR`` and queue sampling excluded).

Task bodies write start/end times to one file per process (see
``benchmarks.backlog_app``).  Measured, not asserted: the targets are
printed beside the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import common
from .worker import Worker, wait

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 5
TASK_SECONDS = 0.02
POLICIES = ("retry", "wait", "park")
# Plain tasks that show this machine's floor (see backlog_app): ``control`` is
# five processes draining a FIFO queue, ``relay`` publishes one task per
# completion, ``parkfloor`` is the least a park can do (its Redis cost floor),
# ``parkguard`` the least one that keeps leases, tokens and idempotence can.
# Their concurrency and FIFO figures bound what any lock can reach.
CONTROLS = ("control", "relay", "parkfloor", "parkguard")
FLOORS = ("parkfloor", "parkguard")


@dataclass(frozen=True)
class BacklogParams:
    sizes: tuple[int, ...] = (3000, 30000)
    light_accounts: int = 10
    light_jobs: int = 10
    concurrency: int = 8
    policies: tuple[str, ...] = CONTROLS + POLICIES
    # Give up on a policy after this many times the ideal span (plus a minute).
    give_up_factor: float = 15.0
    # How long the idle worker's Redis commands are counted.
    idle_seconds: float = 5.0


QUICK = BacklogParams(sizes=(300,), idle_seconds=2.0)
TINY = BacklogParams(sizes=(30,), light_accounts=2, light_jobs=3, concurrency=2, idle_seconds=0.5)


# -- the worker ---------------------------------------------------------------------


class Sampler(threading.Thread):
    """Samples the broker queue length and the worker's RSS every ``interval``."""

    def __init__(self, admin: Any, queue: str, worker: Worker, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.admin, self.queue, self.worker, self.interval = admin, queue, worker, interval
        self.max_queue = 0
        self.max_rss = 0
        self.llen_calls = 0
        self._stop_event = threading.Event()

    def sample(self) -> None:
        self.max_queue = max(self.max_queue, int(self.admin.llen(self.queue)))
        self.llen_calls += 1
        self.max_rss = max(self.max_rss, self.worker.rss())

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            with contextlib.suppress(Exception):
                self.sample()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)


# -- one policy at one size ------------------------------------------------------------


Event = tuple[str, int, float, float, float]  # account, seq, sent, start, end


def _events(directory: Path, run: str) -> tuple[list[Event], int, int]:
    tasks: list[Event] = []
    retries = etas = 0
    for path in directory.glob("*.log"):
        for line in path.read_text().splitlines():
            fields = line.split()
            if fields[0] == "task" and fields[1] == run:
                account, seq = fields[2], int(fields[3])
                sent, start, end = (float(x) for x in fields[4:7])
                tasks.append((account, seq, sent, start, end))
            elif fields[0] == "retry":
                retries += 1
            elif fields[0] == "eta":
                etas += 1
    return tasks, retries, etas


def run_policy(
    url: str, policy: str, n: int, params: BacklogParams, admin: Any, log: Any = print
) -> dict[str, Any]:
    from . import backlog_app

    task = backlog_app.TASKS[policy]
    run = f"{policy}{n}-{uuid.uuid4().hex[:6]}"
    queue = f"backlog-{run}"
    light_total = params.light_accounts * params.light_jobs
    total = n + light_total
    ideal = n * TASK_SECONDS / LIMIT
    events = Path(tempfile.mkdtemp(prefix="bench-backlog-events-"))
    concurrency = LIMIT if policy == "control" else params.concurrency
    worker = Worker(
        "benchmarks.backlog_app", url, f"idle-{run}", concurrency, {"BENCH_EVENTS_DIR": str(events)}
    )
    result: dict[str, Any] = {
        "policy": policy,
        "n": n,
        "light_tasks": light_total,
        "ideal_span_s": ideal,
    }
    sampler = Sampler(admin, queue, worker)
    try:
        worker.wait_ready()
        time.sleep(1.0)  # children settle
        result["idle_rss_mb"] = worker.rss() / 2**20
        # What the idle worker asks of Redis (its sweeper, kombu's BRPOP, ...).
        common.reset_stats(admin)
        idle0 = time.monotonic()
        time.sleep(params.idle_seconds)
        idle_calls = common.command_calls(admin)
        result["idle_cmds_per_s"] = sum(idle_calls.values()) / (time.monotonic() - idle0)
        common.reset_stats(admin)
        cpu0 = common.server_cpu(admin)
        mem0 = int(admin.info("memory")["used_memory"])
        sampler.start()
        t0 = time.monotonic()
        first = n
        if policy == "relay":
            first = min(n, LIMIT)
            admin.set(f"relay:next:{run}", first - 1, ex=86400)
            admin.set(f"relay:n:{run}", n, ex=86400)
        with backlog_app.app.producer_or_acquire() as producer:
            for seq in range(first):
                task.apply_async((run, "heavy", seq, time.time()), queue=queue, producer=producer)
        result["enqueue_s"] = time.monotonic() - t0
        result["heavy_in_broker"] = int(admin.llen(queue))
        mem1 = int(admin.info("memory")["used_memory"])
        waiting = n - result["heavy_in_broker"] if policy in ("park", "relay", *FLOORS) else n
        result["waiting_tasks"] = waiting
        result["redis_bytes_per_waiting_task"] = (mem1 - mem0) / max(waiting, 1)
        backlog_app.app.control.add_consumer(
            queue, destination=[worker.name], reply=True, timeout=10
        )
        with backlog_app.app.producer_or_acquire() as producer:
            for j in range(params.light_jobs):
                for i in range(params.light_accounts):
                    task.apply_async(
                        (run, f"light{i}", j, time.time()), queue=queue, producer=producer
                    )
        done_key = f"backlog:done:{run}"
        give_up = params.give_up_factor * ideal + 60
        try:
            wait(lambda: int(admin.get(done_key) or 0) >= total, give_up, f"{total} tasks", 0.2)
        except TimeoutError as exc:
            result["incomplete"] = f"{exc}: {int(admin.get(done_key) or 0)} done"
        sampler.stop()
        cpu = common.server_cpu(admin) - cpu0
        calls = common.command_calls(admin)
        done = int(admin.get(done_key) or 0)
        result["redis_cpu_us_per_task"] = cpu * 1e6 / max(done, 1)
        calls["incr"] = calls.get("incr", 0) - done
        calls["llen"] = calls.get("llen", 0) - sampler.llen_calls - 1
        result["redis_cmds_per_task"] = sum(calls.values()) / max(done, 1)
        result["script_calls_per_task"] = common.script_calls(calls) / max(done, 1)
        admin.delete(done_key)
    except Exception:
        result["missing"] = worker.tail()
        raise
    finally:
        sampler.stop()
        worker.stop()
    tasks, retries, etas = _events(events, run)
    shutil.rmtree(events, ignore_errors=True)
    result.update(_summarise(tasks, n, ideal))
    result.update(
        requeues=retries,
        eta_messages=etas,
        max_queue=sampler.max_queue,
        peak_rss_mb=sampler.max_rss / 2**20,
    )
    return result


def _summarise(tasks: list[Event], n: int, ideal: float) -> dict[str, Any]:
    heavy = sorted((t for t in tasks if t[0] == "heavy"), key=lambda t: t[3])
    light = [t for t in tasks if t[0] != "heavy"]
    out: dict[str, Any] = {
        "heavy_ran": len(heavy),
        "light_ran": len(light),
        "heavy_distinct": len({t[1] for t in heavy}),
    }
    if heavy:
        span = max(t[4] for t in heavy) - heavy[0][3]
        busy = sum(t[4] - t[3] for t in heavy)
        pairs = [(a, b) for a, b in itertools.pairwise(heavy) if b[1] < a[1]]
        inversions = len(pairs)
        # Of those, starts less than 5 ms apart: a race between children for
        # messages that were in the broker together, not overtaking.
        close = sum(1 for a, b in pairs if b[3] - a[3] < 0.005)
        out.update(
            heavy_span_s=span,
            heavy_span_vs_ideal=span / ideal if ideal else None,
            heavy_mean_concurrency=busy / span if span > 0 else None,
            fifo_inversions=inversions,
            fifo_inversions_pct=100 * inversions / max(len(heavy) - 1, 1),
            fifo_inversions_within_5ms=close,
        )
    if light:
        latency = [t[3] - t[2] for t in light]
        out.update(
            light_p50_s=common.percentile(latency, 0.5),
            light_p99_s=common.percentile(latency, 0.99),
        )
    return out


def targets(row: dict[str, Any], concurrency_limit: int = LIMIT) -> dict[str, bool]:
    """The issue's targets for one row (meant for ``park``)."""
    span = row.get("heavy_span_s") or 0.0
    return {
        "heavy >= 0.9 x limit": (row.get("heavy_mean_concurrency") or 0) >= 0.9 * concurrency_limit,
        "light p50 <= 0.1 x heavy span": (row.get("light_p50_s") or 1e9) <= 0.1 * span,
        "broker holds <= limit heavy tasks": row.get("heavy_in_broker", 1e9) <= concurrency_limit,
        "0 requeues, 0 ETA": row.get("requeues") == 0 and row.get("eta_messages") == 0,
        "RSS <= 1.25 x idle + 50 MB": row.get("peak_rss_mb", 1e9)
        <= 1.25 * row.get("idle_rss_mb", 0) + 50,
        "FIFO inversions <= 2 %": row.get("fifo_inversions_pct", 100) <= 2,
    }


def run(url: str, params: BacklogParams, log: Any = print) -> dict[str, Any]:
    os.environ["BENCH_REDIS_URL"] = url  # before the app module reads it
    from . import backlog_app

    if url != backlog_app.URL:
        raise RuntimeError("benchmarks.backlog_app was imported with another Redis URL")
    admin = common.client(url)
    results: dict[str, Any] = {"params": params.__dict__, "runs": []}
    for n in params.sizes:
        for policy in params.policies:
            log(
                f"  backlog: {policy}, {n} heavy + "
                f"{params.light_accounts * params.light_jobs} light tasks"
            )
            row = run_policy(url, policy, n, params, admin, log)
            if policy == "park":
                row["targets"] = targets(row)
            if policy in CONTROLS:
                row["control"] = True
            results["runs"].append(row)
    return results


# -- report ------------------------------------------------------------------------------


def _f(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def section(r: dict[str, Any]) -> str:
    """The markdown of this part: one table, and the targets of ``park``."""
    p = r["params"]
    lines = [
        "#### Skewed backlog: `retry` vs `wait` vs `park`\n",
        f"One heavy account sends N tasks of {TASK_SECONDS * 1000:.0f} ms, then "
        f"{p['light_accounts']} light accounts send {p['light_jobs']} each; `SemaphoreTask` "
        f"limit {LIMIT} per account; one prefork worker `-c {p['concurrency']}`. Heavy span: "
        "first heavy start to last heavy end (ideal N x 20 ms / 5). Light latency: send to "
        "start. FIFO inv.: consecutive heavy starts out of enqueue order (how many of them "
        "started less than 5 ms apart). Broker: heavy messages in the queue after the heavy "
        "account enqueued (no consumer yet), and the longest queue sampled during the run. "
        "Controls (plain tasks, no lock): `control` is five processes (`-c 5`) draining "
        "the whole backlog from the broker, `relay` publishes the next heavy task when one "
        "ends (as `park` promotes on release), from five seeded ones. They are this "
        "machine's floor for heavy concurrency and FIFO order. `parkfloor` is the least a "
        "park can do (a counter and a list per account, one tiny script at publish and "
        "one at the end; no lease, TTL, token or crash safety): the floor of a park's "
        "Redis cost. `parkguard` is the least a park that keeps its core guarantees can "
        "do (Redis TIME, leases and reservations with deadlines, a token the start must "
        "present, idempotence on the task id, the message stored once, a revoke record "
        "read at the start, the names' index; three scripts per task, as `park`). "
        "Redis memory: "
        "`used_memory` delta per waiting task (parked under `park`, a broker message "
        "otherwise). Commands: `INFO commandstats` per task, broker traffic included; "
        "CPU: the server's `used_cpu_user + used_cpu_sys` per task; idle: commands a "
        "second of the worker before its queue had work.\n",
        "| N | policy | heavy conc. (of 5) | heavy span (ideal) | light p50 / p99 | requeues "
        "| ETA msgs | FIFO inv. | RSS peak / idle | broker heavy / max queue "
        "| Redis cmds/task | Redis CPU/task | idle cmds/s | Redis B / waiting task |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["runs"]:
        span = row.get("heavy_span_s")
        lines.append(
            f"| {row['n']} | `{row['policy']}`{' (incomplete)' if row.get('incomplete') else ''} "
            f"| {_f(row.get('heavy_mean_concurrency'), '.2f')} "
            f"| {_f(span, '.1f')} s ({row['ideal_span_s']:.1f} s) "
            f"| {_f(row.get('light_p50_s'), '.2f')} / {_f(row.get('light_p99_s'), '.2f')} s "
            f"| {row['requeues']} | {row['eta_messages']} "
            f"| {_f(row.get('fifo_inversions_pct'), '.1f')} % "
            f"({row.get('fifo_inversions_within_5ms', 0)} < 5 ms apart) "
            f"| {row['peak_rss_mb']:.0f} / {row['idle_rss_mb']:.0f} MB "
            f"| {row['heavy_in_broker']} / {row['max_queue']} "
            f"| {row['redis_cmds_per_task']:.1f} "
            f"| {_f(row.get('redis_cpu_us_per_task'), '.0f')} us "
            f"| {_f(row.get('idle_cmds_per_s'), '.1f')} "
            f"| {row['redis_bytes_per_waiting_task']:.0f} |"
        )
    lines += _against_relay(r["runs"])
    parks = [row for row in r["runs"] if "targets" in row]
    if parks:
        names = list(parks[0]["targets"])
        lines += [
            "",
            "Targets of `park` (issue 15):",
            "",
            "| target | " + " | ".join(f"N={row['n']}" for row in parks) + " |",
            "|---|" + "---|" * len(parks),
        ]
        for name in names:
            cells = " | ".join("yes" if row["targets"][name] else "**NO**" for row in parks)
            lines.append(f"| {name} | {cells} |")
    return "\n".join(lines) + "\n"


def _against_relay(runs: list[dict[str, Any]]) -> list[str]:
    """Each policy's Redis commands and CPU per task as multiples of the relay's
    at the same N (issue 23's targets for ``park``: <= 2 x and <= 1.5 x)."""
    relay = {row["n"]: row for row in runs if row["policy"] == "relay"}
    rows = [row for row in runs if row["policy"] in (*FLOORS, *POLICIES) and row["n"] in relay]
    if not rows:
        return []
    lines = [
        "",
        "Redis work per task against the relay (same run; `park` targets: "
        "commands <= 2 x, CPU <= 1.5 x, heavy concurrency >= 0.95 x):",
        "",
        "| N | policy | commands | CPU | heavy concurrency |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        base = relay[row["n"]]

        def ratio(field: str, row: dict[str, Any] = row, base: dict[str, Any] = base) -> str:
            a, b = row.get(field), base.get(field)
            return f"{a / b:.2f} x" if a and b else "-"

        lines.append(
            f"| {row['n']} | `{row['policy']}` | {ratio('redis_cmds_per_task')} "
            f"| {ratio('redis_cpu_us_per_task')} "
            f"| {ratio('heavy_mean_concurrency')} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.park_bench [--sizes N ...]``: this part alone."""
    from celery_redislock.testing.servers import redis_url

    parser = argparse.ArgumentParser(prog="python -m benchmarks.park_bench")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(BacklogParams().sizes))
    parser.add_argument(
        "--policies", nargs="+", choices=CONTROLS + POLICIES, default=list(CONTROLS + POLICIES)
    )
    args = parser.parse_args(argv)
    params = BacklogParams(sizes=tuple(args.sizes), policies=tuple(args.policies))
    with redis_url() as url:
        results = run(url, params, lambda msg: print(msg, file=sys.stderr, flush=True))
    print(section(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
