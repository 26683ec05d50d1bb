"""The load the example runs: a cache stampede, a skewed backlog, a report queue.

``python -m example_worker.producer`` (what the docker compose ``producer``
service runs) waits for the workers, sends the scenario, shows progress while
the tasks drain, prints the report, writes the timeline picture and exits
non-zero if an expectation is violated.  ``python -m example_worker.demo``
does the same after starting Redis and a worker itself.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from .records import Recorder
from .scenario import DEMO, HEAVY, REPORT_ACCOUNT, SMALL, Scenario, light_account

__all__ = ["send", "wait_drained", "wait_for_workers"]


def send(recorder: Recorder, scenario: Scenario, seed: int = 7) -> int:
    """Publish the whole scenario; returns the number of messages sent.

    Order, as production traffic would have it: the heavy account's backlog
    lands first, then the light accounts' jobs, while the cache stampede
    (requests for a few users, shuffled) and the report requests arrive
    interleaved with them.
    """
    from .app import generate_report, refresh_cache, sync_account

    rng = random.Random(seed)
    calls: list[tuple[Any, tuple[Any, ...], str]] = []
    for job in range(scenario.heavy_jobs):
        calls.append((sync_account, (HEAVY, job, scenario.job_seconds), f"account:{HEAVY}"))
    for i in range(scenario.light_accounts):
        for job in range(scenario.light_jobs):
            account = light_account(i)
            calls.append((sync_account, (account, job, scenario.job_seconds), f"account:{account}"))
    stampede = [
        (refresh_cache, (user, scenario.query_seconds), f"cache:{user}")
        for user in range(1, scenario.users + 1)
        for _ in range(scenario.requests_per_user)
    ]
    rng.shuffle(stampede)
    reports = [
        (generate_report, (REPORT_ACCOUNT, scenario.report_seconds), f"report:{REPORT_ACCOUNT}")
        for _ in range(scenario.reports)
    ]
    # Interleave: the stampede and the reports arrive while the backlog is queued.
    mixed: list[tuple[Any, tuple[Any, ...], str]] = []
    others = stampede + reports
    step = max(1, len(calls) // max(1, len(others)))
    while calls or others:
        mixed += calls[:step]
        del calls[:step]
        if others:
            mixed.append(others.pop(0))
    sent_at: dict[str, float] = {}
    counts: Counter[str] = Counter()
    for task, args, name in mixed:
        task_id = str(uuid.uuid4())
        sent_at[task_id] = time.time()
        task.apply_async(args, task_id=task_id)
        counts[f"{task.name.rsplit('.', 1)[-1]}|{name}"] += 1
    recorder.sent(sent_at, counts)
    return len(mixed)


def wait_for_workers(
    recorder: Recorder,
    count: int = 1,
    timeout: float = 120.0,
    alive: Callable[[], bool] = lambda: True,
) -> None:
    """Block until ``count`` workers reported ready (``worker_ready``)."""
    deadline = time.monotonic() + timeout
    while len(recorder.ready_workers()) < count:
        if not alive():
            raise RuntimeError("the worker exited before it was ready")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} worker(s) not ready after {timeout:.0f} s")
        time.sleep(0.2)


def wait_drained(
    recorder: Recorder,
    total: int,
    timeout: float = 300.0,
    out: TextIO = sys.stderr,
    alive: Callable[[], bool] = lambda: True,
) -> bool:
    """Show a progress bar until ``total`` task executions finished.

    False if they did not within ``timeout`` (or the worker died).
    """
    started = time.monotonic()
    tty = out.isatty()
    last_line = 0.0
    while True:
        done = recorder.finished()
        elapsed = time.monotonic() - started
        if tty or elapsed - last_line >= 5 or done >= total:
            out.write(("\r" if tty else "") + _bar(done, total, elapsed) + ("" if tty else "\n"))
            out.flush()
            last_line = elapsed
        if done >= total:
            break
        if elapsed > timeout or not alive():
            if tty:
                out.write("\n")
            return False
        time.sleep(0.2)
    if tty:
        out.write("\n")
    return True


def _bar(done: int, total: int, elapsed: float, width: int = 40) -> str:
    filled = width * min(done, total) // max(total, 1)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} tasks  {elapsed:5.1f} s"


def main(argv: list[str] | None = None) -> int:
    from .records import Recorder
    from .report import build_report, write_json, write_timeline

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1, help="workers to wait for")
    parser.add_argument("--small", action="store_true", help="the shortened scenario")
    parser.add_argument("--output", type=Path, default=Path("demo-output"))
    args = parser.parse_args(argv)
    scenario = SMALL if args.small else DEMO
    recorder = Recorder.from_env()
    # Records and cache entries of an earlier run (not the workers' ready marks or locks).
    recorder.clear(keep=("ready",), locks=False)
    print(f"waiting for {args.workers} worker(s) ...", flush=True)
    wait_for_workers(recorder, args.workers, timeout=300)
    total = send(recorder, scenario)
    print(f"sent {total} tasks", flush=True)
    drained = wait_drained(recorder, total, timeout=300)
    report = build_report(recorder, scenario, drained)
    print(report.text())
    json_path = write_json(report, args.output / "report.json")
    try:
        picture = str(write_timeline(report, args.output / "timeline.png"))
    except ImportError as exc:
        picture = f"not written ({exc})"
    print(f"\ntimeline picture: {picture}\nreport data:      {json_path}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
