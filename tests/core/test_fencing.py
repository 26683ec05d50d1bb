"""FencedResource: the storage-side check of fencing tokens, against a real Redis."""

from __future__ import annotations

from typing import Any

import pytest

from celery_redislock import RedisLock
from celery_redislock.core.fencing import FencedResource, StaleToken
from celery_redislock.testing.servers import RedisServer


def test_write_needs_a_token_not_older_than_any_seen(redis_client: Any, prefix: str) -> None:
    res = FencedResource(redis_client, f"{prefix}:res")
    assert res.fence() == 0
    assert res.write(5, "a")
    assert res.write(5, "b"), "the same holder may write again"
    refused = res.write(4, "stale")
    assert not refused
    assert (refused.fence, refused.value) == (5, b"b")
    assert res.write(7, "c")
    assert res.read(7) == b"c"
    assert res.fence() == 7


def test_a_claim_shuts_out_older_holders_before_the_newer_one_writes(
    redis_client: Any, prefix: str
) -> None:
    """The lost-update case: old holder read, paused; new holder read; old holder wakes."""
    res = FencedResource(redis_client, f"{prefix}:counter")
    assert res.write(10, "0")
    old_value = res.read(10)
    assert res.read(11) == b"0"  # the newer holder reads: raises the fence
    assert not res.write(10, int(old_value or 0) + 1), "stale write after a newer read"
    with pytest.raises(StaleToken, match=r"token 10 is stale.*seen token 11"):
        res.read(10)
    assert res.write(11, 1)
    assert redis_client.hgetall(f"{prefix}:counter") == {b"fence": b"11", b"value": b"1"}


def test_large_tokens_compare_as_integers(redis_client: Any, prefix: str) -> None:
    res = FencedResource(redis_client, f"{prefix}:big")
    assert res.write(2**63 - 1, "max")
    assert not res.write(2**63 - 2, "x")
    res2 = FencedResource(redis_client, f"{prefix}:digits")
    assert res2.write(99, "a")
    assert res2.write(100, "b"), "100 > 99 although '100' < '99' as strings"
    assert not res2.write(98, "c")


@pytest.mark.parametrize(
    ("token", "value", "error"),
    [(-1, "v", ValueError), (1.5, "v", TypeError), (True, "v", TypeError), (1, None, TypeError)],
)
def test_bad_input_is_refused_precisely(
    redis_client: Any, prefix: str, token: Any, value: Any, error: type[Exception]
) -> None:
    res = FencedResource(redis_client, f"{prefix}:r")
    with pytest.raises(error):
        res.write(token, value)
    assert redis_client.exists(f"{prefix}:r") == 0
    with pytest.raises(TypeError):
        FencedResource(object(), "k")
    with pytest.raises(ValueError):
        FencedResource(redis_client, "")


def test_lock_tokens_keep_fencing_across_a_restart_of_the_lock_redis(
    own_redis: RedisServer, redis_client: Any, prefix: str
) -> None:
    """The resource lives elsewhere; the lock Redis loses everything; the new
    holder's token is still higher, so the old holder is shut out."""
    import redis

    lock_client = redis.Redis.from_url(own_redis.url, socket_timeout=5)
    res = FencedResource(redis_client, f"{prefix}:res")
    old = RedisLock(lock_client, "job", ttl=30)
    assert old.acquire()
    assert old.token is not None
    assert res.write(old.token, "old")
    own_redis.restart()
    new = RedisLock(lock_client, "job", ttl=30)
    assert new.acquire(timeout=5)
    assert new.token is not None and new.token > old.token
    assert res.read(new.token) == b"old"
    assert not res.write(old.token, "late write of the old holder")
    assert res.write(new.token, "new")
    new.release()
    lock_client.close()
