"""A ``celery worker`` subprocess for the Celery benchmarks, and waiting with a deadline."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["Worker", "wait"]

ROOT = Path(__file__).resolve().parent.parent


class Worker:
    """``celery -A <app> worker`` (prefork) in its own session; ``stop()`` kills the group."""

    def __init__(
        self,
        app: str,
        url: str,
        queues: str,
        concurrency: int,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-worker-"))
        self.ready = self.dir / "ready"
        self.log = self.dir / "worker.log"
        self.name = f"bench{os.getpid()}-{uuid.uuid4().hex[:6]}@localhost"
        env = {
            **os.environ,
            **(env or {}),
            "BENCH_REDIS_URL": url,
            "BENCH_READY_FILE": str(self.ready),
        }
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            "-P",
            "prefork",
            "-c",
            str(concurrency),
            "-Q",
            queues,
            "-n",
            self.name,
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "warning",
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 120) -> None:
        wait(lambda: self.ready.exists() or self.proc.poll() is not None, timeout, "worker")
        if self.proc.poll() is not None:
            raise RuntimeError(f"celery worker did not start:\n{self.tail()}")

    def rss(self) -> int:
        """Resident bytes of the main process and its pool children (Linux /proc)."""
        pids = {self.proc.pid}
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
                with open(f"/proc/{self.proc.pid}/task/{tid}/children") as f:
                    pids.update(int(p) for p in f.read().split())
        total = 0
        for pid in pids:
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{pid}/status") as f:
                    line = next(x for x in f if x.startswith("VmRSS:"))
                total += int(line.split()[1]) * 1024
        return total

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])
        return ""

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def _wait(condition: Any, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def wait(condition: Any, timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll ``condition`` until it is true; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
