"""Part ``rate``: one heavy key's backlog at a per-key rate, light keys beside it.

A heavy key sends ``n`` tasks of 5 ms, then ``light_keys`` light keys send
``light_jobs`` each, all at ``rate`` per key; two prefork workers ``-c 4``.
Side by side in one run (``benchmarks.rate_app``): this library's ``park``
(``RateLimitedTask``), Celery's own ``rate_limit`` (per worker and task
type: two workers give about twice the rate, and no key is apart) and the
``retry(countdown)`` recipe users write with a per-key limiter.  Per
contender: the heavy key's achieved rate over its steady state (the middle
80 % of its starts), the most starts of one key in any 1 s window (from every
start time), light latency (send to start), lateness (a start minus the time
it became eligible: its key's schedule, or the previous start of the key plus
one interval when that is later), requeues and ETA messages, workers' RSS,
and Redis commands and CPU per task.

Also, without Celery: Redis CPU per ``RateLimiter.try_acquire`` against the
``limits`` library's moving and sliding windows on the same Redis.
Measured, not asserted: the targets are printed beside the figures.
"""

from __future__ import annotations

import argparse
import bisect
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import common
from .worker import Worker

CONTENDERS = ("timer", "park", "celery", "retry")


@dataclass(frozen=True)
class RateParams:
    n: int = 3000
    rate: float = 50.0
    light_keys: int = 10
    light_jobs: int = 10
    workers: int = 2
    concurrency: int = 4
    contenders: tuple[str, ...] = CONTENDERS
    primitive_calls: int = 20000


QUICK = RateParams(n=300, primitive_calls=2000)
TINY = RateParams(n=30, light_keys=2, light_jobs=3, workers=1, concurrency=2, primitive_calls=200)

Start = tuple[str, int, float, float]  # key, seq, sent, start


def _events(directory: Path, run: str) -> tuple[list[Start], int, int]:
    starts: list[Start] = []
    retries = etas = 0
    for path in directory.glob("*.log"):
        for line in path.read_text().splitlines():
            fields = line.split()
            if fields[0] == "task" and fields[1] == run:
                starts.append((fields[2], int(fields[3]), float(fields[4]), float(fields[5])))
            elif fields[0] == "retry":
                retries += 1
            elif fields[0] == "eta":
                etas += 1
    return starts, retries, etas


def max_in_window(times: list[float], window: float = 1.0) -> int:
    """The most of ``times`` in any window of ``window`` seconds starting at one of them."""
    ordered = sorted(times)
    return max(
        (bisect.bisect_left(ordered, t + window) - i for i, t in enumerate(ordered)), default=0
    )


def lateness(starts: list[float], first_sent: float, rate: float) -> list[float]:
    """Per start after the first: how late it came after it became eligible."""
    interval, out = 1 / rate, []
    ordered = sorted(starts)
    for k in range(1, len(ordered)):
        eligible = max(first_sent + k * interval, ordered[k - 1] + interval)
        out.append(max(ordered[k] - eligible, 0.0))
    return out


def run_contender(url: str, contender: str, params: RateParams, admin: Any) -> dict[str, Any]:
    from . import rate_app

    task = rate_app.TASKS[contender]
    run = f"{contender}-{uuid.uuid4().hex[:6]}"
    queue = f"rate-{run}"
    light_total = params.light_keys * params.light_jobs
    total = params.n + light_total
    events = Path(tempfile.mkdtemp(prefix="bench-rate-events-"))
    env = {"BENCH_EVENTS_DIR": str(events), "BENCH_RATE": f"{params.rate:g}/s"}
    workers = [
        Worker("benchmarks.rate_app", url, queue, params.concurrency, env)
        for _ in range(params.workers)
    ]
    result: dict[str, Any] = {"contender": contender, "n": params.n, "light_tasks": light_total}
    try:
        for worker in workers:
            worker.wait_ready()
        time.sleep(1.0)
        idle_rss = sum(w.rss() for w in workers)
        common.reset_stats(admin)
        cpu0 = common.server_cpu(admin)
        with rate_app.app.producer_or_acquire() as producer:
            if contender == "timer":  # the control: on schedule, light keys after it
                t0 = time.monotonic()
                for seq in range(params.n):
                    common.sleep_until(t0 + seq / params.rate)
                    task.apply_async(
                        (run, "heavy", seq, time.time()), queue=queue, producer=producer
                    )
            else:
                for seq in range(params.n):
                    task.apply_async(
                        (run, "heavy", seq, time.time()), queue=queue, producer=producer
                    )
            for j in range(params.light_jobs):
                for i in range(params.light_keys):
                    task.apply_async(
                        (run, f"light{i}", j, time.time()), queue=queue, producer=producer
                    )
        done_key = f"ratebench:done:{run}"
        give_up = 3 * params.n / params.rate + 120
        peak_rss = idle_rss
        deadline = time.monotonic() + give_up
        while int(admin.get(done_key) or 0) < total and time.monotonic() < deadline:
            peak_rss = max(peak_rss, sum(w.rss() for w in workers))
            time.sleep(0.25)
        done = int(admin.get(done_key) or 0)
        if done < total:
            result["incomplete"] = f"{done} of {total} done after {give_up:.0f} s"
        calls = common.command_calls(admin)
        calls["incr"] = calls.get("incr", 0) - done
        result["redis_cmds_per_task"] = sum(calls.values()) / max(done, 1)
        result["redis_cpu_us_per_task"] = (common.server_cpu(admin) - cpu0) * 1e6 / max(done, 1)
        result.update(idle_rss_mb=idle_rss / 2**20, peak_rss_mb=peak_rss / 2**20)
        admin.delete(done_key)
    finally:
        for worker in workers:
            worker.stop()
    starts, retries, etas = _events(events, run)
    shutil.rmtree(events, ignore_errors=True)
    result.update(_summarise(starts, params), requeues=retries, eta_messages=etas)
    return result


def _summarise(starts: list[Start], params: RateParams) -> dict[str, Any]:
    heavy = sorted(s[3] for s in starts if s[0] == "heavy")
    light = [s for s in starts if s[0] != "heavy"]
    out: dict[str, Any] = {"heavy_ran": len(heavy), "light_ran": len(light)}
    by_key: dict[str, list[float]] = {}
    for key, _, _, start in starts:
        by_key.setdefault(key, []).append(start)
    out["max_starts_per_key_in_1s"] = max((max_in_window(t) for t in by_key.values()), default=0)
    if len(heavy) >= 10:
        lo, hi = len(heavy) // 10, len(heavy) - len(heavy) // 10 - 1
        out["heavy_rate"] = (hi - lo) / (heavy[hi] - heavy[lo]) if heavy[hi] > heavy[lo] else None
        first_sent = min(s[2] for s in starts if s[0] == "heavy")
        late = lateness(heavy, first_sent, params.rate)
        for key in by_key:
            if key != "heavy":
                sent = min(s[2] for s in starts if s[0] == key)
                late += lateness(by_key[key], sent, params.rate)
        out.update(
            lateness_p50_s=common.percentile(late, 0.5),
            lateness_p99_s=common.percentile(late, 0.99),
        )
    if light:
        latency = [s[3] - s[2] for s in light]
        out.update(
            light_p50_s=common.percentile(latency, 0.5),
            light_p99_s=common.percentile(latency, 0.99),
        )
    return out


def targets(row: dict[str, Any], rate: float) -> dict[str, bool]:
    """The issue's targets for one row (meant for ``park``)."""
    achieved = row.get("heavy_rate") or 0.0
    return {
        "heavy rate within 2 % of the rate": abs(achieved - rate) <= 0.02 * rate,
        "starts of a key in any 1 s <= rate + burst": row.get("max_starts_per_key_in_1s", 1e9)
        <= rate + 1,
        "light p50 < 0.5 s": (row.get("light_p50_s") or 1e9) < 0.5,
        "0 requeues, 0 ETA": row.get("requeues") == 0 and row.get("eta_messages") == 0,
        "RSS flat (<= 1.25 x idle + 50 MB)": row.get("peak_rss_mb", 1e9)
        <= 1.25 * row.get("idle_rss_mb", 0) + 50,
        "lateness p50 < 20 ms": (row.get("lateness_p50_s") or 1e9) < 0.02,
        "lateness p99 < 100 ms": (row.get("lateness_p99_s") or 1e9) < 0.1,
    }


def primitive_cost(url: str, calls: int) -> dict[str, Any]:
    """Redis CPU (µs) per call of one rate decision: ours and the ``limits`` library's."""
    from celery_redislock import RateLimiter

    admin = common.client(url)
    contenders: dict[str, Any] = {}
    ours = RateLimiter(
        admin, f"prim-{uuid.uuid4().hex[:6]}", rate=1e6, burst=10, prefix="ratebench"
    )
    contenders["RateLimiter.try_acquire (GCRA)"] = ours.try_acquire
    try:
        from limits import RateLimitItemPerSecond
        from limits.storage import RedisStorage
        from limits.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter

        storage = RedisStorage(url.replace("redis://", "redis://", 1))
        item = RateLimitItemPerSecond(1_000_000)
        moving = MovingWindowRateLimiter(storage)
        sliding = SlidingWindowCounterRateLimiter(storage)
        key = uuid.uuid4().hex[:6]
        contenders["limits moving window"] = lambda: moving.hit(item, "prim-moving", key)
        contenders["limits sliding window counter"] = lambda: sliding.hit(item, "prim-slide", key)
    except ImportError as exc:  # pip install 'celery-redislock[bench]'
        contenders["limits"] = f"not installed ({exc})"
    out: dict[str, Any] = {"calls": calls}
    for name, call in contenders.items():
        if isinstance(call, str):
            out[name] = call
            continue
        common.reset_stats(admin)
        cpu0 = common.server_cpu(admin)
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        wall = time.perf_counter() - t0
        out[name] = {
            "redis_cpu_us_per_call": (common.server_cpu(admin) - cpu0) * 1e6 / calls,
            "redis_cmds_per_call": sum(common.command_calls(admin).values()) / calls,
            "client_us_per_call": wall * 1e6 / calls,
        }
    return out


def run(url: str, params: RateParams, log: Any = print) -> dict[str, Any]:
    os.environ["BENCH_REDIS_URL"] = url  # before the app module reads it
    os.environ["BENCH_RATE"] = f"{params.rate:g}/s"
    from . import rate_app

    if url != rate_app.URL:
        raise RuntimeError("benchmarks.rate_app was imported with another Redis URL")
    admin = common.client(url)
    results: dict[str, Any] = {"params": params.__dict__, "runs": []}
    for contender in params.contenders:
        light = params.light_keys * params.light_jobs
        log(f"  rate: {contender}, {params.n} heavy + {light} light tasks at {params.rate:g}/s")
        row = run_contender(url, contender, params, admin)
        if contender == "park":
            row["targets"] = targets(row, params.rate)
        results["runs"].append(row)
    log("  rate: one decision's Redis cost, ours and the limits library's")
    results["primitive"] = primitive_cost(url, params.primitive_calls)
    return results


def _f(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def section(r: dict[str, Any]) -> str:
    """The markdown of this part."""
    p = r["params"]
    lines = [
        "#### Per-key rate: `park` vs Celery's `rate_limit` vs `retry(countdown)`\n",
        f"One heavy key sends {p['n']} tasks of 5 ms, then {p['light_keys']} light keys send "
        f"{p['light_jobs']} each, every key at {p['rate']:g}/s; {p['workers']} prefork workers "
        f"`-c {p['concurrency']}`. Heavy rate: starts per second over the middle 80 % of its "
        "starts. Max/1 s: the most starts of one key in any 1 s window. Lateness: a start "
        "minus the time it became eligible. Celery's `rate_limit` is per worker and task "
        "type, so it is not per key and two workers double it.\n",
        "| contender | heavy rate | max / 1 s | light p50 / p99 | lateness p50 / p99 "
        "| requeues | ETA msgs | RSS peak / idle | Redis cmds / task | Redis CPU / task |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["runs"]:
        lines.append(
            f"| `{row['contender']}`{' (incomplete)' if row.get('incomplete') else ''} "
            f"| {_f(row.get('heavy_rate'), '.1f')}/s | {row.get('max_starts_per_key_in_1s')} "
            f"| {_f(row.get('light_p50_s'), '.2f')} / {_f(row.get('light_p99_s'), '.2f')} s "
            f"| {_f(row.get('lateness_p50_s'), '.3f')} / {_f(row.get('lateness_p99_s'), '.3f')} s "
            f"| {row['requeues']} | {row['eta_messages']} "
            f"| {_f(row.get('peak_rss_mb'), '.0f')} / {_f(row.get('idle_rss_mb'), '.0f')} MB "
            f"| {_f(row.get('redis_cmds_per_task'), '.1f')} "
            f"| {_f(row.get('redis_cpu_us_per_task'), '.0f')} µs |"
        )
    parks = [row for row in r["runs"] if "targets" in row]
    if parks:
        lines += ["", "Targets of `park`:", "", "| target | met |", "|---|---|"]
        for name, met in parks[0]["targets"].items():
            lines.append(f"| {name} | {'yes' if met else '**NO**'} |")
    prim = r.get("primitive") or {}
    if prim:
        lines += [
            "",
            f"One rate decision ({prim['calls']} calls, one client):",
            "",
            "| limiter | Redis CPU / call | Redis cmds / call | client / call |",
            "|---|---|---|---|",
        ]
        for name, row in prim.items():
            if name == "calls":
                continue
            if isinstance(row, str):
                lines.append(f"| {name} | {row} | | |")
                continue
            lines.append(
                f"| {name} | {row['redis_cpu_us_per_call']:.1f} µs "
                f"| {row['redis_cmds_per_call']:.1f} | {row['client_us_per_call']:.0f} µs |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.rate_bench [--quick] [--n N]``: this part alone."""
    from celery_redislock.testing.servers import redis_url

    parser = argparse.ArgumentParser(prog="python -m benchmarks.rate_bench")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int)
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    args = parser.parse_args(argv)
    params = QUICK if args.quick else RateParams()
    params = RateParams(
        **{
            **params.__dict__,
            "contenders": tuple(args.contenders),
            **({"n": args.n} if args.n else {}),
        }
    )
    with redis_url() as url:
        results = run(url, params, lambda msg: print(msg, file=sys.stderr, flush=True))
    print(section(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
