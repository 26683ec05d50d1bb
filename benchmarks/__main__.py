"""``python -m benchmarks [--quick] [--only PART ...]``: run, print, write results.

Starts a throwaway redis-server (or uses ``REDIS_URL``) so every contender
runs against the same server in one run.  Writes ``results.json``,
``chart.png`` and ``README.md`` (the tables) under ``--out``; a full run of
every part into the default directory also refreshes the tables in
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from celery_redislock.testing.servers import redis_url

from . import (
    celery_bench,
    coalesce_bench,
    common,
    limits_bench,
    locks,
    machine,
    market,
    metrics_bench,
    park_bench,
    rate_bench,
    redis_cost,
    report,
    semaphores,
)

PARTS = (
    "locks",
    "cost",
    "semaphores",
    "market",
    "celery",
    "backlog",
    "rate",
    "limits",
    "metrics",
    "coalesce",
)
HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes (development)")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--out", type=Path, help="default: benchmarks/results[/quick]")
    args = parser.parse_args(argv)
    out: Path = args.out or (HERE / "results" / "quick" if args.quick else HERE / "results")
    mode = "quick" if args.quick else "full"

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started = time.monotonic()
    results: dict[str, Any] = {"mode": mode}
    with redis_url() as url:
        results["machine"] = machine.describe(common.client(url))
        log(f"benchmarks ({mode}) on {url}: {results['machine']}")
        if "locks" in args.only or "semaphores" in args.only:
            lp = locks.QUICK if args.quick else locks.LockParams()
            sp = semaphores.QUICK if args.quick else semaphores.SemaphoreParams()
            size = max(lp.fair_procs, lp.handoff_waiters + 1, *sp.clients)
            with common.fleet(size) as fleet:
                if "locks" in args.only:
                    results["locks"] = locks.run(url, lp, fleet, log)
                if "semaphores" in args.only:
                    results["semaphores"] = semaphores.run(url, sp, fleet, log)
        if "cost" in args.only:
            cost = redis_cost.QUICK if args.quick else redis_cost.CostParams()
            results["cost"] = redis_cost.run(url, cost, log)
        if "market" in args.only:
            mp_ = market.QUICK if args.quick else market.MarketParams()
            with common.fleet(max(s + b for s, b in mp_.configs)) as fleet:
                results["market"] = market.run(url, mp_, fleet, log)
        if "celery" in args.only:
            cp = celery_bench.QUICK if args.quick else celery_bench.CeleryParams()
            results["celery"] = celery_bench.run(url, cp, log)
        if "backlog" in args.only:
            bp = park_bench.QUICK if args.quick else park_bench.BacklogParams()
            results["backlog"] = park_bench.run(url, bp, log)
        if "rate" in args.only:
            rp = rate_bench.QUICK if args.quick else rate_bench.RateParams()
            results["rate"] = rate_bench.run(url, rp, log)
        if "limits" in args.only:
            lim = limits_bench.QUICK if args.quick else limits_bench.LimitsParams()
            results["limits"] = limits_bench.run(url, lim, log)
        if "metrics" in args.only:
            mp = metrics_bench.QUICK if args.quick else metrics_bench.MetricsParams()
            results["metrics"] = metrics_bench.run(url, mp, log)
        if "coalesce" in args.only:
            cop = coalesce_bench.QUICK if args.quick else coalesce_bench.CoalesceParams()
            results["coalesce"] = coalesce_bench.run(url, cop, log)
    results["elapsed_s"] = time.monotonic() - started

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    text = report.markdown(results)
    (out / "README.md").write_text(text)
    report.chart(results, out / "chart.png")
    print(text)
    full = not args.quick and set(args.only) == set(PARTS) and args.out is None
    if full and report.update_results_page(HERE.parent / "docs" / "benchmarks.md", text):
        log("updated the tables in docs/benchmarks.md")
    log(f"wrote {out}/results.json, README.md, chart.png in {results['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
