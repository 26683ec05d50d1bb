"""Bad input gets a precise exception, at construction or call time."""

from __future__ import annotations

import math
from typing import Any

import pytest

from celery_redislock import FairSemaphore, RateLimiter, RedisLock


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"name": 7}, TypeError, "lock name must be a str"),
        ({"name": ""}, ValueError, "must not be empty"),
        ({"name": "a{b}"}, ValueError, "hash tag"),
        ({"name": "x" * 1025}, ValueError, "limit is 1024"),
        ({"ttl": 0}, ValueError, "positive"),
        ({"ttl": -1}, ValueError, "positive"),
        ({"ttl": math.inf}, ValueError, "finite"),
        ({"ttl": math.nan}, ValueError, "finite"),
        ({"ttl": 0.001}, ValueError, "at least"),
        ({"ttl": 1e13}, ValueError, "at most 100000000 s"),  # beyond a wait's and Redis's range
        ({"ttl": 1e16}, ValueError, "at most 100000000 s"),
        ({"ttl": "30"}, TypeError, "number of seconds"),
        ({"ttl": True}, TypeError, "number of seconds"),
        ({"ttl": None}, TypeError, "number of seconds"),
        ({"prefix": ""}, ValueError, "prefix"),
        ({"prefix": "a{"}, ValueError, "prefix"),
        ({"prefix": 3}, TypeError, "prefix"),
        ({"blocking_timeout": -1}, ValueError, "blocking_timeout"),
        ({"blocking_timeout": "1"}, TypeError, "blocking_timeout"),
        ({"on_lost": "log"}, TypeError, "on_lost"),
        ({"meta": {"when": object()}}, TypeError, "JSON"),
        ({"owner_prefix": "a:b"}, ValueError, "owner_prefix"),
    ],
)
def test_lock_constructor_rejects(
    redis_client: Any, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    args = {"name": "ok", **kwargs}
    name = args.pop("name")
    with pytest.raises(error, match=match):
        RedisLock(redis_client, name, **args)


@pytest.mark.parametrize(
    ("limit", "error"),
    [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError), ("3", TypeError)],
)
def test_semaphore_limit_rejected(redis_client: Any, limit: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="limit"):
        FairSemaphore(redis_client, "s", limit)


def test_client_must_be_a_redis_client() -> None:
    with pytest.raises(TypeError, match="redis-py client"):
        RedisLock("redis://localhost", "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="redis-py client"):
        RateLimiter(None, "api", "10/s")


def test_acquire_arguments(redis_client: Any, prefix: str) -> None:
    lock = RedisLock(redis_client, "args", prefix=prefix)
    with pytest.raises(ValueError, match="timeout"):
        lock.acquire(timeout=-1)
    with pytest.raises(ValueError, match="blocking acquires only"):
        lock.acquire(blocking=False, timeout=1)
    with pytest.raises(ValueError, match="ttl"):
        assert lock.acquire()
        lock.refresh(ttl=0)
    lock.release()
