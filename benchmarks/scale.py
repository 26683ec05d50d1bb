"""What scaling out costs: one redis-server vs a local 3-master Redis Cluster.

    python -m benchmarks.scale [--seconds 3] [--procs 2] [--leases 1000] [--json out.json]

Starts both deployments itself (local processes, no Docker) and measures, on
each:

* uncontended ``RedisLock`` acquire + release cycles per second, summed over
  ``--procs`` client processes, each cycling over 64 names so that on the
  cluster the locks spread over all three masters;
* the time of one renewal batch of ``--leases`` held leases (what the
  heartbeat does every ttl/3): one script call on a single server, one
  pipeline per master on the cluster.

All servers and clients share this machine's cores, so the cluster cannot
show more capacity than one server here; the figures show the per-operation
cost of cluster routing, not the capacity of a real multi-host cluster.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery_redislock import RedisLock
from celery_redislock.core.connection import client_from_url
from celery_redislock.core.heartbeat import refresh_leases
from celery_redislock.testing.servers import RedisServer
from devtools.engines import LocalCluster

NAMES_PER_PROCESS = 64


def _cycle_worker(url: str, start_at: float, seconds: float, queue: Any) -> None:
    client = client_from_url(url)
    locks = [
        RedisLock(client, f"bench-{os.getpid()}-{i}", ttl=30, prefix="scalebench")
        for i in range(NAMES_PER_PROCESS)
    ]
    for lock in locks:  # warm up: connections, slot map, scripts
        lock.acquire(blocking=False)
        lock.release()
    time.sleep(max(0.0, start_at - time.time()))
    cycles = 0
    began = time.perf_counter()
    end = began + seconds
    while time.perf_counter() < end:
        lock = locks[cycles % NAMES_PER_PROCESS]
        if not lock.acquire(blocking=False):
            raise RuntimeError(f"uncontended acquire of {lock.name} failed")
        lock.release()
        cycles += 1
    queue.put((cycles, time.perf_counter() - began))
    client.close()


def cycles_per_second(url: str, procs: int, seconds: float) -> float:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 3.0 + procs * 0.5
    workers = [
        ctx.Process(target=_cycle_worker, args=(url, start_at, seconds, queue))
        for _ in range(procs)
    ]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
        if worker.exitcode != 0:
            raise RuntimeError(f"benchmark worker exited with {worker.exitcode}")
    return sum(cycles / elapsed for cycles, elapsed in results)


def renewal_batch_ms(url: str, leases: int, runs: int = 7) -> float:
    client = client_from_url(url)
    locks = [RedisLock(client, f"renew-{i}", ttl=60, prefix="scalebench") for i in range(leases)]
    for lock in locks:
        if not lock.acquire(blocking=False):
            raise RuntimeError(f"could not take {lock.name}")
    try:
        held = [lock.lease for lock in locks if lock.lease is not None]
        timings = []
        for _ in range(runs):
            began = time.perf_counter()
            remaining = refresh_leases(client, held)
            timings.append((time.perf_counter() - began) * 1000)
            if not all(ms > 0 for ms in remaining):
                raise RuntimeError("a lease was not renewed")
        return statistics.median(timings)
    finally:
        for lock in locks:
            lock.release()
        client.close()


@contextmanager
def deployments() -> Iterator[dict[str, str]]:
    with RedisServer() as single, LocalCluster(masters=3) as cluster:
        yield {"single redis-server": single.url, "3-master cluster": cluster.url}


def run(seconds: float, procs: int, leases: int) -> list[dict[str, Any]]:
    rows = []
    with deployments() as urls:
        for label, url in urls.items():
            rows.append(
                {
                    "deployment": label,
                    "cycles_per_s": round(cycles_per_second(url, procs, seconds)),
                    "renewal_batch_ms": round(renewal_batch_ms(url, leases), 2),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    rows = run(args.seconds, args.procs, args.leases)
    print(f"acquire+release cycles/s ({args.procs} client processes, uncontended) and one")
    print(f"renewal batch of {args.leases} leases, on {os.cpu_count()} cores:\n")
    print("| deployment | acquire+release cycles/s | renewal batch (ms) |")
    print("|---|---:|---:|")
    for row in rows:
        print(f"| {row['deployment']} | {row['cycles_per_s']} | {row['renewal_batch_ms']} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"params": vars(args), "results": rows}, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
