"""``python -m benchmarks.per_call``: the per-call part of ``benchmarks.celery_bench``
alone (each guarded kind beside its control and its floor, a key per call),
its table printed as ``make bench`` reports it."""

from __future__ import annotations

import argparse
import os

from celery_redislock.testing.servers import redis_url

from . import common, report
from .celery_bench import CeleryParams, per_call
from .worker import Worker


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=CeleryParams.runs)
    parser.add_argument("--calls", type=int, default=CeleryParams.calls, help="per kind and run")
    args = parser.parse_args()
    params = CeleryParams(runs=args.runs, calls=args.calls)
    with redis_url() as url:
        os.environ["BENCH_REDIS_URL"] = url  # before the app module reads it
        from . import celery_app as bench_app

        worker = Worker("benchmarks.celery_app", url, "ctl,crash", params.concurrency)
        try:
            worker.wait_ready()
            calls = per_call(url, worker, params, common.client(url), bench_app, print)
        finally:
            worker.stop()
    print(report.celery_section({"params": params.__dict__, "calls": calls}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
