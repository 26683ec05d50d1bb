"""``python -m benchmarks.park_scripts``: Redis-measured time per call of the
park's three per-task scripts, with a given number of reservations in flight.

One name, limit L: ``enqueue`` parks N tasks (the first L reserve), then each
reserved task is claimed (``park_claim.lua``) and released
(``park_release.lua``, which promotes the next), so L - 1 reservations stay in
flight throughout, as when a busy queue delays the promoted messages.  Each
call's time is what Redis measured (``INFO commandstats``, usec of
``fcall`` or ``evalsha``, read around every call), not the client's round trip; the
messages are ~2 KB, as Celery's.  With ``--baseline REF`` the same cycle
runs against the package as of git ``REF`` (in a subprocess, interleaved
with the current one, against a flushed server each time), so one run
compares before and after.  Speed is reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import redis

from . import common

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("enqueue", "claim", "release")


def _script_usec(client: redis.Redis) -> int:
    """Usec Redis spent in script calls so far (FCALL or EVALSHA: core/scripts.py)."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {"usec": 0})["usec"]) for c in ("fcall", "evalsha"))


def cycle(url: str, limit: int, tasks: int) -> dict[str, float]:
    """Median Redis-measured usec per call of each script over one park cycle."""
    from celery_redislock.core.park import ParkConfig, Parking, Verdict

    try:
        from celery_redislock.core.capacity import Capacity

        slots: Any = Capacity.semaphore(limit)
    except ImportError:  # a --baseline from before Capacity: the limit as the scripts take it
        slots = limit
    client = redis.Redis.from_url(url)
    parking = Parking(client, f"ps-{uuid.uuid4().hex[:8]}", "name")
    envelope = json.dumps({"body": "x" * 1800, "headers": {"id": "task"}})
    config, times = ParkConfig(), {phase: [] for phase in PHASES}  # type: dict[str, list[int]]

    def timed(phase: str, method: Any, *args: Any) -> Any:
        before = _script_usec(client)
        reply = method(*args)
        times[phase].append(_script_usec(client) - before)
        return reply

    queue = []
    for n in range(tasks):
        admission = timed("enqueue", parking.enqueue, f"t{n}", slots, envelope, 0, config, "task")
        if admission.verdict is Verdict.RESERVED:
            queue.append((f"t{n}", admission.token))
    while queue:
        task_id, token = queue.pop(0)
        owner = f"owner-{task_id}"
        timed("claim", parking.claim, task_id, str(token), owner, 60, "{}", slots, "task")
        _, promoted = timed("release", parking.release, owner, slots, config, "task")
        queue += [(p.task_id, p.token) for p in promoted]
    return {phase: float(statistics.median(times[phase])) for phase in PHASES}


def _package_at(ref: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "celery_redislock"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _run(url: str, limit: int, tasks: int, package: Path | None) -> dict[str, float]:
    # The package under test first on the path, then this checkout for the benchmark.
    first = package or ROOT
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(first), str(ROOT)]))
    code = (
        "import json, sys; from benchmarks.park_scripts import cycle; "
        "print(json.dumps(cycle(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, url, str(limit), str(tasks)],
        env=env,
        cwd=first,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limits", type=int, nargs="+", default=[2, 5, 20])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--baseline", help="a git ref to compare with")
    parser.add_argument("--url", help="an existing Redis (it is flushed; default: a throwaway)")
    opts = parser.parse_args(argv)
    with common.redis_at(opts.url) as url, tempfile.TemporaryDirectory() as tmp:
        admin = redis.Redis.from_url(url)
        versions: dict[str, Path | None] = {"now": None}
        if opts.baseline:
            versions[opts.baseline] = _package_at(opts.baseline, Path(tmp))
        print(
            "| limit (in flight) | version | enqueue us | claim us | release us | "
            "per task us |\n|---|---|---|---|---|---|"
        )
        for limit in opts.limits:
            runs: dict[str, list[dict[str, float]]] = {v: [] for v in versions}
            for _ in range(opts.rounds):
                for label, package in versions.items():
                    admin.flushall()
                    admin.script_flush()
                    runs[label].append(_run(url, limit, opts.tasks, package))
            for label in versions:
                med = {p: statistics.median(r[p] for r in runs[label]) for p in PHASES}
                print(
                    f"| {limit} ({limit - 1}) | {label} | {med['enqueue']:.1f} "
                    f"| {med['claim']:.1f} | {med['release']:.1f} "
                    f"| {sum(med.values()):.1f} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
