"""Shared plumbing: counted Redis clients, a fleet of spawned worker processes,
server-side command counts, medians.

Nothing here measures anything by itself.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import queue
import statistics
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
from redis.connection import Connection

# ---------------------------------------------------------------------------
# Client-side command counting.
#
# ``INFO commandstats`` also counts the commands a Lua script runs inside
# Redis, so it cannot tell one EVALSHA round trip from ten polling SETNXs by
# itself.  Every client made here counts the commands it *sends* (EVALSHA = 1,
# each command of a pipeline = 1), per process.


class _CountingPacker:
    """Wraps a connection's command packer; every packed command is one sent command."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def pack(self, *args: Any) -> Any:
        CountingConnection.sent += 1
        return self.inner.pack(*args)


class CountingConnection(Connection):
    """A redis-py connection that counts the commands it packs for sending."""

    sent = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._command_packer = _CountingPacker(self._command_packer)


def client(url: str, **kwargs: Any) -> redis.Redis:
    """A redis-py client for ``url`` whose sent commands are counted."""
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection, **kwargs)
    return redis.Redis(connection_pool=pool)


@contextmanager
def redis_at(url: str | None) -> Iterator[str]:
    """``url``, or a throwaway ``redis-server``'s while the block runs."""
    if url:
        yield url
        return
    from celery_redislock.testing.servers import RedisServer

    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


def sent_commands() -> int:
    return CountingConnection.sent


# ---------------------------------------------------------------------------
# Server-side command counting.


def reset_stats(conn: redis.Redis) -> None:
    conn.config_resetstat()


def server_cpu(conn: redis.Redis) -> float:
    """CPU seconds (user + system) the Redis server has used, from ``INFO cpu``."""
    cpu = conn.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


#: The commands that run one of our scripts: ``FCALL`` where the server has
#: Functions, ``EVALSHA`` (and ``EVAL``) elsewhere (core/scripts.py).
SCRIPT_COMMANDS = ("fcall", "evalsha", "eval")


def script_calls(calls: dict[str, int]) -> int:
    """How many script calls ``calls`` (from :func:`command_calls`) holds."""
    return sum(calls.get(command, 0) for command in SCRIPT_COMMANDS)


def command_calls(conn: redis.Redis) -> dict[str, int]:
    """Calls per command since the last reset, without INFO/CONFIG themselves.

    Includes commands run inside Lua scripts (Redis counts those too).
    """
    stats = conn.info("commandstats")
    calls: dict[str, int] = {}
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_")
        if name.startswith(("info", "config")):
            continue
        calls[name] = int(value["calls"])
    return calls


# ---------------------------------------------------------------------------
# Statistics.


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return float(ordered[index])


def median_of_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise median of numeric fields over runs; other fields from run 0.

    Every numeric field is the median of its own values, so fields of one
    row may come from different runs.  ``runs`` keeps the raw values.
    """
    merged: dict[str, Any] = {}
    for key, first in runs[0].items():
        values = [run[key] for run in runs]
        if isinstance(first, bool) or not isinstance(first, (int, float)):
            merged[key] = first
        else:
            merged[key] = median(values)
    merged["runs"] = runs
    return merged


# ---------------------------------------------------------------------------
# A fleet of spawned worker processes.
#
# Spawning 32 interpreters costs seconds on a small machine, so a fleet is
# started once per section and reused for every contender and run.  Every
# worker inherits one lock and a small shared array of doubles (``SHARED``),
# used to observe concurrency and hand-off times across processes.

SHARED_SLOTS = 8


@dataclass
class Shared:
    lock: Any
    values: Any  # mp.Array("d", SHARED_SLOTS)

    def reset(self) -> None:
        with self.lock:
            for i in range(SHARED_SLOTS):
                self.values[i] = 0.0


SHARED: Shared | None = None


def shared() -> Shared:
    if SHARED is None:
        raise RuntimeError("only available inside a fleet worker")
    return SHARED


def _serve(index: int, inbox: Any, outbox: Any, lock: Any, values: Any) -> None:
    global SHARED
    SHARED = Shared(lock, values)
    while True:
        job = inbox.get()
        if job is None:
            return
        func, args = job
        try:
            outbox.put((index, True, func(*args)))
        except BaseException:
            outbox.put((index, False, traceback.format_exc()))


def _ready(*modules: str) -> int:
    for module in modules:
        importlib.import_module(module)
    return os.getpid()


#: what every fleet process imports before its first synchronised start
SCENARIO_MODULES = ("benchmarks.locks", "benchmarks.market", "benchmarks.semaphores")


class Fleet:
    """``n`` spawned processes that run module-level functions on request."""

    def __init__(self, n: int) -> None:
        ctx = mp.get_context("spawn")
        self.shared = Shared(ctx.Lock(), ctx.Array("d", SHARED_SLOTS, lock=False))
        self._outbox: Any = ctx.Queue()
        self._inboxes = [ctx.Queue() for _ in range(n)]
        self._procs = [
            ctx.Process(
                target=_serve,
                args=(i, box, self._outbox, self.shared.lock, self.shared.values),
                daemon=True,
            )
            for i, box in enumerate(self._inboxes)
        ]
        for proc in self._procs:
            proc.start()
        # Wait until every worker has imported the benchmark modules, so that
        # synchronised starts are not eaten by interpreter start-up.
        self.run(_ready, [SCENARIO_MODULES] * n, timeout=300)

    @property
    def size(self) -> int:
        return len(self._procs)

    def run(
        self, func: Callable[..., Any], args: Sequence[tuple[Any, ...]], timeout: float = 600
    ) -> list[Any]:
        """Run ``func(*args[i])`` in worker ``i`` for every i, all at once; results in order."""
        if len(args) > self.size:
            raise ValueError(f"{len(args)} jobs for a fleet of {self.size}")
        self.shared.reset()
        for box, job_args in zip(self._inboxes, args, strict=False):
            box.put((func, job_args))
        results: list[Any] = [None] * len(args)
        deadline = time.monotonic() + timeout
        for _ in args:
            try:
                index, ok, value = self._outbox.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"{func.__name__} did not finish in {timeout} s") from None
            if not ok:
                raise RuntimeError(f"{func.__name__} failed in worker {index}:\n{value}")
            results[index] = value
        return results

    def close(self) -> None:
        for box in self._inboxes:
            box.put(None)
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def fleet(n: int) -> Iterator[Fleet]:
    f = Fleet(n)
    try:
        yield f
    finally:
        f.close()


def start_time(margin: float) -> float:
    """A ``time.monotonic()`` instant ``margin`` s from now, for synchronised starts.

    CLOCK_MONOTONIC is system-wide on Linux, so every process on the machine
    can wait for the same instant.
    """
    return time.monotonic() + margin


def sleep_until(instant: float) -> None:
    delay = instant - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def pid() -> int:
    return os.getpid()
