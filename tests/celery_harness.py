"""Real ``celery worker`` subprocesses for tests (reusable by every test module).

:class:`WorkerProcess` starts ``python -m celery -A <module> worker`` in a new
session with the config passed as ``REDISLOCK_TEST_*`` environment variables
(see ``tests/celery_apps/basic.py``), waits for the ready file its
``worker_ready`` handler writes, and kills the whole process group on
:meth:`kill` / teardown.  :func:`worker_factory` is the fixture body: use
the ``celery_worker_factory`` fixture (``from tests.celery_harness import
celery_worker_factory`` in a test module) or :func:`worker_factory` directly
for module-scoped workers.

Example::

    config = {"redis": redis_url, "prefix": prefix}     # see tests/celery_apps/basic.py
    app = create_app(config)                            # the client side
    worker = celery_worker_factory(config, pool="prefork", concurrency=4)
    app.tasks["basic.sleeper"].delay("k", 1.0).get(timeout=60)
    worker.children(); worker.stop(); worker.kill(); worker.log_path
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.celery_apps.basic import env_from_config

ROOT = Path(__file__).resolve().parent.parent


class WorkerProcess:
    """One ``celery worker`` process (and its pool children)."""

    def __init__(
        self,
        config: dict[str, str],
        log_path: Path,
        *,
        module: str = "tests.celery_apps.basic",
        pool: str = "prefork",
        concurrency: int = 2,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.config = dict(config)
        self.ready_file = log_path.with_suffix(".ready")
        self.config["ready_file"] = str(self.ready_file)
        self.log_path = log_path
        self.module = module
        self.pool = pool
        self.concurrency = concurrency
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0) -> WorkerProcess:
        self.ready_file.unlink(missing_ok=True)
        env = {**os.environ, **env_from_config(self.config)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            self.module,
            "worker",
            "-P",
            self.pool,
            "-c",
            str(self.concurrency),
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "info",
            "-n",
            f"w{os.getpid()}-{id(self)}@%h",
            *self.extra_args,
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"celery worker exited early:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"celery worker not ready in {timeout} s:\n{self.log_tail()}")
            time.sleep(0.05)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def children(self) -> list[int]:
        """Pids of the pool's child processes."""
        try:
            return [c.pid for c in psutil.Process(self.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int | None:
        """Warm shutdown (SIGTERM to the main process); returns the exit code."""
        if not self.alive():
            return None
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the whole process group (main process and children)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(10)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def worker_factory(log_dir: Path) -> Iterator[Any]:
    """Yields ``start(config, **kwargs) -> WorkerProcess``; kills them all afterwards."""
    started: list[WorkerProcess] = []

    def start(config: dict[str, str], **kwargs: Any) -> WorkerProcess:
        worker = WorkerProcess(config, log_dir / f"worker-{len(started)}.log", **kwargs)
        started.append(worker)
        return worker.start()

    try:
        yield start
    finally:
        for worker in started:
            worker.kill()


@pytest.fixture
def celery_worker_factory(tmp_path: Path) -> Iterator[Any]:
    """``start(config, **WorkerProcess kwargs) -> WorkerProcess``; all killed at teardown."""
    with worker_factory(tmp_path) as start:
        yield start
