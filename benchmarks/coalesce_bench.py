"""Part "coalesce": the stale-cache scenario (docs/coalescing.md).

A source value per key changes in bursts (``burst`` changes ``gap`` seconds
apart, each followed by a ``refresh(key)`` call, as an app calls it after a
write); a refresh reads the source, rebuilds for 0.3 s and writes the cache.
Once every call has settled, a key is *stale* when its cache differs from its
source: a change was left unserved.  The same schedule (seeded) is run with
``lock_policy="skip"``, ``"keep_latest"`` and ``keep_latest`` with
``lock_debounce=0.3``, on one ``celery worker -c 8`` (rebuilds sleep).  For debounce it also
reports the lateness of each burst's run: its start minus (the burst's last
call + 0.3 s).  Targets: no stale key for keep_latest and debounce; the
debounced run within 50 ms of its due time.
"""

from __future__ import annotations

import os
import random
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

from . import common
from .worker import Worker, wait

VARIANTS = ("skip", "keep_latest", "debounce")


@dataclass(frozen=True)
class CoalesceParams:
    keys: int = 20
    bursts: int = 3  #: per key
    burst: int = 5  #: changes and calls per burst
    gap: float = 0.05  #: seconds between two calls of a burst
    spread: float = 12.0  #: seconds over which the bursts start
    seed: int = 7


QUICK = CoalesceParams(keys=6, bursts=2, spread=3.0)


def schedule(params: CoalesceParams) -> list[tuple[float, str, int]]:
    """(time, key, burst number) of every call, sorted; bursts of one key at
    least 1.5 s apart, so a debounced run is told apart from the next burst."""
    rng = random.Random(params.seed)
    calls: list[tuple[float, str, int]] = []
    for k in range(params.keys):
        slots = sorted(rng.sample(range(int(params.spread / 1.5) + params.bursts), params.bursts))
        for b, slot in enumerate(slots):
            start = slot * 1.5 + rng.uniform(0, 0.5)
            calls += [(start + i * params.gap, f"k{k}", b) for i in range(params.burst)]
    return sorted(calls)


def run(url: str, params: CoalesceParams, log: Any = print) -> dict[str, Any]:
    os.environ["BENCH_REDIS_URL"] = url
    from . import coalesce_app as bench_app

    admin = common.client(url)
    plan = schedule(params)
    worker = Worker("benchmarks.coalesce_app", url, "celery", 8)
    results: dict[str, Any] = {"params": params.__dict__, "calls": len(plan)}
    try:
        worker.wait_ready()
        for variant in VARIANTS:
            log(f"  coalesce: {len(plan)} calls, policy {variant}")
            results[variant] = _one(admin, bench_app, variant, plan, params)
    finally:
        worker.stop()
    return results


def _one(
    admin: Any,
    bench_app: Any,
    variant: str,
    plan: list[tuple[float, str, int]],
    params: CoalesceParams,
) -> dict[str, Any]:
    task = getattr(bench_app, variant)
    tag = uuid.uuid4().hex[:6]
    last_call: dict[tuple[str, int], float] = {}
    began = time.time()
    for at, key, burst in plan:
        delay = began + at - time.time()
        if delay > 0:
            time.sleep(delay)
        admin.incr(f"coal:src:{tag}{key}")  # the write ...
        task.delay(f"{tag}{key}")  # ... and the refresh it asks for
        last_call[(key, burst)] = time.time()
    keys = sorted({key for _, key, _ in plan})

    def runs() -> int:
        return sum(admin.llen(f"coal:starts:{tag}{k}") for k in keys)

    seen = [-1, time.monotonic()]

    def settled() -> bool:  # no new run for 2 s: every call has ended
        n = runs()
        if n != seen[0]:
            seen[0], seen[1] = n, time.monotonic()
        return time.monotonic() - seen[1] > 2.0

    wait(settled, 120, f"the {variant} runs to settle", interval=0.1)
    stale = sum(admin.get(f"coal:cache:{tag}{k}") != admin.get(f"coal:src:{tag}{k}") for k in keys)
    out: dict[str, Any] = {"runs": runs(), "stale_keys": stale, "keys": len(keys)}
    if variant == "debounce":
        late = []
        for (key, _), t_last in last_call.items():
            starts = [float(s) for s in admin.lrange(f"coal:starts:{tag}{key}", 0, -1)]
            after = [s for s in starts if s >= t_last]
            if after:
                late.append(min(after) - (t_last + bench_app.DEBOUNCE))
        late.sort()
        out["late_ms"] = {
            "min": late[0] * 1000,
            "p50": statistics.median(late) * 1000,
            "max": late[-1] * 1000,
            "n": len(late),
        }
    return out


def section(r: dict[str, Any]) -> str:
    p = r["params"]
    rows = [f"| {v} | {r[v]['runs']} | {r[v]['stale_keys']} / {r[v]['keys']} |" for v in VARIANTS]
    late = r["debounce"]["late_ms"]
    return "\n".join(
        [
            f"### Coalescing: the stale-cache scenario ({p['keys']} keys x {p['bursts']} bursts of "
            f"{p['burst']} writes and refresh calls {p['gap'] * 1000:.0f} ms apart, 0.3 s rebuild; "
            f"{r['calls']} calls per policy)",
            "",
            "| policy | rebuilds run | keys left stale |",
            "|---|---|---|",
            *rows,
            "",
            f"Debounce (0.3 s): each burst's run started {late['p50']:.1f} ms after its due time "
            f"(median; min {late['min']:.1f}, max {late['max']:.1f} ms over {late['n']} bursts).",
        ]
    )
