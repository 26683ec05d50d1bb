"""What the Celery benchmark apps' task bodies and signals record, in one place.

Each process appends lines to ``<BENCH_EVENTS_DIR>/<pid>.log`` (not to Redis,
so the Redis command counts are the library's and the broker's), and gets a
Redis client of its own after the fork.  ``record_retries_and_etas`` logs a
``retry`` line per retry and an ``eta`` line per message received with an
ETA, and writes ``BENCH_READY_FILE`` when the worker is ready.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import redis
from celery.signals import task_received, task_retry, worker_ready

__all__ = ["announce_ready", "client", "log", "process_state", "record_retries_and_etas"]

_state: dict[str, Any] = {}
_clients: dict[int, redis.Redis] = {}


def process_state(url: str) -> dict[str, Any]:
    """This process's event file (``file``) and Redis client (``redis``)."""
    pid = os.getpid()
    if _state.get("pid") != pid:
        directory = Path(os.environ.get("BENCH_EVENTS_DIR", "/tmp"))
        _state.update(pid=pid, file=open(directory / f"{pid}.log", "a", buffering=1))  # noqa: SIM115
        _state["redis"] = redis.Redis.from_url(url)
    return _state


def log(url: str, line: str) -> None:
    process_state(url)["file"].write(line + "\n")


def record_retries_and_etas(url: str) -> None:
    """Connect the receivers (once per app module)."""

    def retried(**_: Any) -> None:
        log(url, "retry")

    def received(request: Any = None, **_: Any) -> None:
        if getattr(request, "eta", None):
            log(url, "eta")

    task_retry.connect(retried, weak=False)
    task_received.connect(received, weak=False)
    announce_ready()


def announce_ready() -> None:
    """Write the worker's pid to ``BENCH_READY_FILE`` when it is ready
    (``benchmarks.worker.Worker.wait_ready`` waits for the file)."""

    def ready(**_: Any) -> None:
        path = os.environ.get("BENCH_READY_FILE")
        if path:
            Path(path).write_text(str(os.getpid()))

    worker_ready.connect(ready, weak=False)


def client(url: str) -> redis.Redis:
    """This process's Redis client (a new one after a fork), without an event file."""
    pid = os.getpid()
    if _clients.get(pid) is None:
        _clients.clear()
        _clients[pid] = redis.Redis.from_url(url)
    return _clients[pid]
