"""Part "metrics": what Prometheus metrics cost a worker (docs/observability.md).

Two ``celery worker`` subprocesses of ``benchmarks.celery_app`` in turn, the
same but for ``redislock_metrics_port``; each runs ``tasks`` no-op
``LockedTask`` tasks per run, runs interleaved (without, with, without, ...)
so drift hits both alike; the medians are compared.  Target: tasks/s with
metrics at least 0.97 x without.
"""

from __future__ import annotations

import os
import urllib.request
from dataclasses import dataclass
from typing import Any

from celery_redislock.testing.servers import free_port

from . import common
from .celery_bench import _throughput_run
from .worker import Worker


@dataclass(frozen=True)
class MetricsParams:
    runs: int = 9
    tasks: int = 2000
    concurrency: int = 2


QUICK = MetricsParams(runs=1, tasks=300)


def run(url: str, params: MetricsParams, log: Any = print) -> dict[str, Any]:
    os.environ["BENCH_REDIS_URL"] = url  # before the app module reads it
    from . import celery_app as bench_app

    if url != bench_app.URL:
        raise RuntimeError("benchmarks.celery_app was imported with another Redis URL")

    admin = common.client(url)
    port = free_port()
    workers = {
        "without metrics": Worker("benchmarks.celery_app", url, "ctl", params.concurrency),
        "with metrics": Worker(
            "benchmarks.celery_app",
            url,
            "ctl",
            params.concurrency,
            {"BENCH_METRICS_PORT": str(port)},
        ),
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in workers}
    try:
        for worker in workers.values():
            worker.wait_ready()
            _throughput_run(bench_app.app, worker, bench_app.locked, 100, admin)  # warm up
        for _ in range(params.runs):
            for name, worker in workers.items():
                log(f"  metrics: {params.tasks} x LockedTask, {name}")
                runs[name].append(
                    _throughput_run(bench_app.app, worker, bench_app.locked, params.tasks, admin)
                )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
            served = page.read().decode()
    finally:
        for worker in workers.values():
            worker.stop()
    medians = {name: common.median_of_runs(r) for name, r in runs.items()}
    ratio = medians["with metrics"]["tasks_per_s"] / medians["without metrics"]["tasks_per_s"]
    return {
        "params": params.__dict__,
        "throughput": medians,
        "ratio": ratio,
        "served_acquired": sum(
            float(line.rsplit(" ", 1)[1])
            for line in served.splitlines()
            if line.startswith("redislock_acquired_total{")
        ),
    }


def section(r: dict[str, Any]) -> str:
    rows = [
        f"| {name} | {row['tasks_per_s']:.0f} | {row['worker_cpu_us'] or 0:.0f} µs |"
        for name, row in r["throughput"].items()
    ]
    met = "yes" if r["ratio"] >= 0.97 else "no"
    return "\n".join(
        [
            "#### Prometheus metrics on a worker\n",
            f"`LockedTask` no-op tasks, `-c {r['params']['concurrency']}`, {r['params']['tasks']} "
            f"per run, median of {r['params']['runs']} interleaved runs.\n",
            "| worker | tasks/s | worker CPU / task |",
            "|---|---|---|",
            *rows,
            "",
            f"With metrics / without: {r['ratio']:.3f} (target >= 0.97: {met}); the scrape "
            f"counted {r['served_acquired']:.0f} acquisitions.\n",
        ]
    )
