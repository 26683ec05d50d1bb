"""``python -m benchmarks.park_profile``: where the Redis work of a parked task
goes (issue: park's Redis cost; the breakdown in docs/park.md).

A throwaway ``redis-server`` serves as broker, result backend and lock store;
``MONITOR`` records every command.  One ``celery worker -c 2`` of the test app
(``tests.celery_apps.basic``) first sits idle (its sweeper, heartbeat and
broker polling), then runs ``TASKS`` ``basic.parked`` tasks on one key (limit
2, 50 ms each; all but two park at enqueue).  Each script call is reported
with the ``redis.call`` s it made (MONITOR shows them as ``lua`` lines after the
call), and every command is put in one of: our scripts (by name), other
lock-store commands, broker (kombu), result backend.
"""

from __future__ import annotations

import collections
import contextlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
TASKS = 40
IDLE = 10.0


def _scripts() -> dict[str, str]:
    from celery_redislock.core import scripts

    found = [s for s in vars(scripts).values() if isinstance(s, scripts.LuaScript)]
    names = {s.sha: s.name for s in found}  # EVALSHA <sha>
    names.update({scripts.LIBRARY.function(s.name).lower(): s.name for s in found})  # FCALL <name>
    return names


class Monitor(threading.Thread):
    """Every command the server runs, as (is_lua, command, first key or "")."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.lines: list[tuple[bool, str, str, str]] = []
        self.running = True

    def run(self) -> None:
        with contextlib.suppress(redis.RedisError, ValueError), self.client.monitor() as monitor:
            for entry in monitor.listen():
                if not self.running:
                    return
                parts = entry["command"].split(" ")
                command = parts[0].upper()
                arg = parts[1] if len(parts) > 1 else ""
                arg2 = parts[3] if len(parts) > 3 else ""  # EVALSHA/FCALL sha/name numkeys KEY1
                self.lines.append((entry["client_type"] == "lua", command, arg, arg2))


def classify(lines: list[tuple[bool, str, str, str]], prefix: str) -> dict[str, Any]:
    names = _scripts()
    calls: collections.Counter[str] = collections.Counter()
    inner: collections.Counter[str] = collections.Counter()
    by_command: collections.Counter[tuple[str, str]] = collections.Counter()
    other: collections.Counter[str] = collections.Counter()
    current = ""
    for is_lua, command, arg, key in lines:
        if is_lua:
            inner[current] += 1
            by_command[(current, command)] += 1
            continue
        if command in ("EVALSHA", "EVAL", "FCALL"):
            current = names.get(arg.lower(), "EVAL" if command == "EVAL" else arg[:8])
            calls[current] += 1
        elif arg.startswith((f"{prefix}:rec:", f"{prefix}:signals", f"{prefix}:gate")):
            other["test recorder: " + command] += 1
        elif arg.startswith(prefix) or key.startswith(prefix):
            other["lock store: " + command] += 1
        elif arg.startswith("celery-task-meta"):
            other["result backend: " + command] += 1
        else:
            other["broker: " + command] += 1
    return {
        "calls": dict(calls),
        "inner": dict(inner),
        "other": dict(other),
        "by_command": by_command,
    }


def main() -> int:
    from celery_redislock.testing.servers import free_port
    from tests.celery_apps.basic import create_app
    from tests.celery_harness import worker_factory

    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="park-profile-"))
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(data),
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        prefix = f"p-{uuid.uuid4().hex[:8]}"
        config = {"redis": url, "prefix": prefix, "park_sweep": "1"}
        app = create_app(config)
        with worker_factory(data) as start:
            start(config, pool="prefork", concurrency=2)
            time.sleep(2)  # let start-up settle
            monitor = Monitor(url)
            monitor.start()
            time.sleep(IDLE)
            idle = classify(list(monitor.lines), prefix)
            mark = len(monitor.lines)
            results = [app.tasks["basic.parked"].delay("k", n, 0.05) for n in range(TASKS)]
            for r in results:
                r.get(timeout=120)
            time.sleep(0.5)
            busy = classify(monitor.lines[mark:], prefix)
            monitor.running = False
        report(idle, busy)
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(data, ignore_errors=True)
    return 0


def report(idle: dict[str, Any], busy: dict[str, Any]) -> None:
    print(f"idle worker, {IDLE:.0f} s (per second):")
    for name, n in sorted(idle["calls"].items()):
        print(f"  {name}: {n / IDLE:.2f} calls, {idle['inner'].get(name, 0) / IDLE:.2f} inner")
    for name, n in sorted(idle["other"].items()):
        print(f"  {name}: {n / IDLE:.2f}")
    print(f"{TASKS} parked tasks on one key, limit 2 (per task):")
    total_ours = 0.0
    for name, n in sorted(busy["calls"].items()):
        inner = busy["inner"].get(name, 0)
        total_ours += (n + inner) / TASKS
        print(
            f"  {name}: {n / TASKS:.2f} calls x {inner / max(n, 1):.1f} inner = "
            f"{(n + inner) / TASKS:.1f} commands"
        )
        top = sorted(
            ((c, k) for (script, k), c in busy["by_command"].items() if script == name),
            reverse=True,
        )
        print("      " + ", ".join(f"{k} {c / max(n, 1):.1f}" for c, k in top))
    groups: collections.Counter[str] = collections.Counter()
    for name, n in busy["other"].items():
        groups[name.split(":")[0]] += n
        print(f"  {name}: {n / TASKS:.2f}")
    print(
        f"  = scripts {total_ours:.1f} commands per task; "
        + ", ".join(f"{g} {n / TASKS:.1f}" for g, n in sorted(groups.items()))
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
