"""Count the calls and modules of the library on one parked task's life.

``python -m devtools.park_walk`` starts a throwaway Redis and one solo
worker, holds a ``SemaphoreTask`` key of limit 1 with task A, calls task B
(which parks at publish), lets A finish (its release promotes B) and B run.
A profiler (``sys.setprofile``, main thread only) records every function of
``celery_redislock`` entered on B's path:

* the caller: ``B.delay()`` until it returns;
* the worker: from the end of A's body until A's run is over (A's release,
  which promotes and re-publishes B);
* the worker: B's message received until B's run is over (its claim, body
  and release).

It prints the number of calls, of distinct functions and of distinct modules
of each part and in all, then the calls of each part in order (``-v``).  The
figures of docs/architecture.md "One task's life" come from it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from celery import Celery, signals

from celery_redislock import SemaphoreTask

ROOT = Path(__file__).resolve().parents[1]
MARK = "devtools.park_walk.mark"

app = Celery("park_walk", set_as_current=False)
app.conf.update(
    broker_url=os.environ.get("PARK_WALK_REDIS", "redis://127.0.0.1:6379/0"),
    result_backend=os.environ.get("PARK_WALK_REDIS", "redis://127.0.0.1:6379/0"),
    redislock_prefix=os.environ.get("PARK_WALK_PREFIX", "walk"),
    task_default_queue=os.environ.get("PARK_WALK_PREFIX", "walk"),
    worker_hijack_root_logger=False,
)


def mark(label: str) -> None:
    """A call the profiler records: the boundaries of the parts counted."""


@app.task(base=SemaphoreTask, name="walk.job", semaphore_key="walk:{key}", semaphore_limit=1)
def job(key: str, gate: str = "") -> None:
    if gate:
        import redis

        client = redis.Redis.from_url(app.conf.broker_url)
        client.blpop([gate], timeout=30)
    mark("body-end")


class Recorder:
    """Every library function entered in the main thread, with the marks."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__") or ""
        if module.startswith("celery_redislock"):
            code = frame.f_code  # co_qualname: Python 3.11+
            self.calls.append(f"{module}:{getattr(code, 'co_qualname', code.co_name)}")
        elif module == __name__ and frame.f_code.co_name == "mark":
            self.calls.append(f"{MARK}:{frame.f_locals['label']}")

    @contextmanager
    def recording(self) -> Iterator[None]:
        sys.setprofile(self)
        try:
            yield
        finally:
            sys.setprofile(None)


def _install_in_worker(path: str) -> None:
    recorder = Recorder()

    @signals.worker_ready.connect(weak=False)
    def start(**_: Any) -> None:
        sys.setprofile(recorder)

    @signals.task_received.connect(weak=False)
    def received(request: Any, **_: Any) -> None:
        recorder.calls.append(f"{MARK}:received:{request.task_name}:{request.args}")

    @signals.task_postrun.connect(weak=False)
    def postrun(task_id: str, args: Any, **_: Any) -> None:
        recorder.calls.append(f"{MARK}:postrun:{args}")
        Path(path).write_text("\n".join(recorder.calls))


if os.environ.get("PARK_WALK_TRACE"):
    _install_in_worker(os.environ["PARK_WALK_TRACE"])


def _segment(calls: list[str], start: str, end: str) -> list[str]:
    i = next(n for n, c in enumerate(calls) if c.startswith(start))
    j = next(n for n, c in enumerate(calls) if n > i and c.startswith(end))
    return [c for c in calls[i + 1 : j] if not c.startswith(MARK)]


def _summary(name: str, calls: list[str]) -> str:
    modules = {c.split(":", 1)[0] for c in calls}
    functions = set(calls)
    return f"{name:<34} {len(calls):>6} {len(functions):>10} {len(modules):>8}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="list the calls")
    args = parser.parse_args()
    from celery_redislock.testing.servers import RedisServer

    with RedisServer() as server:
        url = server.url
        prefix = f"walk{os.getpid()}"
        trace = Path(tempfile.gettempdir()) / f"park-walk-{os.getpid()}.log"
        env = {
            **os.environ,
            "PARK_WALK_REDIS": url,
            "PARK_WALK_PREFIX": prefix,
            "PARK_WALK_TRACE": str(trace),
            "PYTHONPATH": str(ROOT),
        }
        app.conf.update(
            broker_url=url, result_backend=url, redislock_prefix=prefix, task_default_queue=prefix
        )
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "devtools.park_walk",
                "worker",
                "-P",
                "solo",
                "-Q",
                prefix,
                "--without-gossip",
                "--without-mingle",
                "-l",
                "WARNING",
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        try:
            gate = f"{prefix}:gate"
            first = job.delay("k", gate)
            deadline = time.monotonic() + 60
            while first.state != "STARTED" and not _held(url, prefix):
                if time.monotonic() > deadline:
                    raise SystemExit("task A did not start")
                time.sleep(0.05)
            recorder = Recorder()
            with recorder.recording():
                second = job.delay("k")
            caller = [c for c in recorder.calls if not c.startswith(MARK)]
            if second.state != "PARKED":
                raise SystemExit(f"task B was not parked at publish: {second.state}")
            import redis

            redis.Redis.from_url(url).rpush(gate, "go")
            second.get(timeout=60)
            deadline = time.monotonic() + 30
            while "postrun:['k']" not in (trace.read_text() if trace.exists() else ""):
                if time.monotonic() > deadline:
                    raise SystemExit("no trace of task B")
                time.sleep(0.05)
            calls = trace.read_text().splitlines()
        finally:
            worker.terminate()
            worker.wait(30)
        release = _segment(calls, f"{MARK}:body-end", f"{MARK}:postrun")
        tail = calls[calls.index(f"{MARK}:postrun:['k', '{gate}']") :]
        run = _segment(tail, f"{MARK}:received:walk.job", f"{MARK}:postrun")
        print(f"{'part':<34} {'calls':>6} {'functions':>10} {'modules':>8}")
        parts = [
            ("caller: B.delay() (parks)", caller),
            ("worker: A's release (promotes B)", release),
            ("worker: B received, claimed, run", run),
        ]
        for name, part in parts:
            print(_summary(name, part))
        print(_summary("in all", caller + release + run))
        if args.verbose:
            for name, part in parts:
                print(f"\n{name}:")
                for call in part:
                    print(f"  {call}")
        trace.unlink(missing_ok=True)
    return 0


def _held(url: str, prefix: str) -> bool:
    import redis

    return bool(redis.Redis.from_url(url).exists(f"{prefix}:{{walk:k}}:holders"))


if __name__ == "__main__":
    threading.current_thread().name = "park-walk"
    raise SystemExit(main())
