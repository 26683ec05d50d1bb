"""The lock and semaphore functions of *Redis in Action* ch. 6, re-implemented for comparison.

Faithful to *Redis in Action* (Josiah Carlson), sections 6.2 (locks) and 6.3 (counting semaphores),
flaws included: client clocks, 1 ms polling, several round trips per acquire,
SETNX then EXPIRE, WATCH/MULTI release.  Only the redis-py API changed
(``zadd(name, {member: score})``, bytes decoded for comparisons).  ``clock``
parameters exist only so the smoke test can skew a client's clock, which is
how the book itself says the basic semaphore goes wrong.

Used by the benchmarks only; never by the library.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

Clock = Callable[[], float]


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


# -- Redis in Action 6.2: locks ----------------------------------------------------------


def acquire_lock(conn: redis.Redis, lockname: str, acquire_timeout: float = 10) -> str | bool:
    """Listing 8: SETNX a uuid, poll every 1 ms; no expiry."""
    identifier = str(uuid.uuid4())
    end = time.time() + acquire_timeout
    while time.time() < end:
        if conn.setnx("lock:" + lockname, identifier):
            return identifier
        time.sleep(0.001)
    return False


def release_lock(conn: redis.Redis, lockname: str, identifier: str) -> bool:
    """Listing 10: WATCH the key, compare, MULTI/DEL/EXEC; retry on WatchError."""
    pipe = conn.pipeline(True)
    lockname = "lock:" + lockname
    while True:
        try:
            pipe.watch(lockname)  # type: ignore[no-untyped-call]
            if _text(pipe.get(lockname)) == identifier:
                pipe.multi()
                pipe.delete(lockname)
                pipe.execute()
                return True
            pipe.unwatch()
            break
        except redis.exceptions.WatchError:
            pass
    return False


def acquire_lock_with_timeout(
    conn: redis.Redis, lockname: str, acquire_timeout: float = 10, lock_timeout: float = 10
) -> str | bool:
    """Listing 11: SETNX then EXPIRE; repair a missing TTL; poll every 1 ms."""
    identifier = str(uuid.uuid4())
    lockname = "lock:" + lockname
    lock_timeout = math.ceil(lock_timeout)
    end = time.time() + acquire_timeout
    while time.time() < end:
        if conn.setnx(lockname, identifier):
            conn.expire(lockname, lock_timeout)
            return identifier
        elif conn.ttl(lockname) < 0:
            conn.expire(lockname, lock_timeout)
        time.sleep(0.001)
    return False


# -- Redis in Action 6.3: counting semaphores -----------------------------------------------------


def acquire_semaphore(
    conn: redis.Redis, semname: str, limit: int, timeout: float = 10, clock: Clock = time.time
) -> str | None:
    """Listing 12: ZSET scored by the client's clock; rank < limit wins."""
    identifier = str(uuid.uuid4())
    now = clock()
    pipeline = conn.pipeline(True)
    pipeline.zremrangebyscore(semname, "-inf", now - timeout)
    pipeline.zadd(semname, {identifier: now})
    pipeline.zrank(semname, identifier)
    if pipeline.execute()[-1] < limit:
        return identifier
    conn.zrem(semname, identifier)
    return None


def release_semaphore(conn: redis.Redis, semname: str, identifier: str) -> bool:
    """Listing 13."""
    return bool(conn.zrem(semname, identifier))


def acquire_fair_semaphore(
    conn: redis.Redis, semname: str, limit: int, timeout: float = 10, clock: Clock = time.time
) -> str | None:
    """Listing 14: counter + owner ZSET + timeout ZSET, two transactions."""
    identifier = str(uuid.uuid4())
    czset = semname + ":owner"
    ctr = semname + ":counter"
    now = clock()
    pipeline = conn.pipeline(True)
    pipeline.zremrangebyscore(semname, "-inf", now - timeout)
    pipeline.zinterstore(czset, {czset: 1, semname: 0})
    pipeline.incr(ctr)
    counter = pipeline.execute()[-1]

    pipeline.zadd(semname, {identifier: now})
    pipeline.zadd(czset, {identifier: counter})
    pipeline.zrank(czset, identifier)
    if pipeline.execute()[-1] < limit:
        return identifier

    pipeline.zrem(semname, identifier)
    pipeline.zrem(czset, identifier)
    pipeline.execute()
    return None


def release_fair_semaphore(conn: redis.Redis, semname: str, identifier: str) -> bool:
    """Listing 15."""
    pipeline = conn.pipeline(True)
    pipeline.zrem(semname, identifier)
    pipeline.zrem(semname + ":owner", identifier)
    return bool(pipeline.execute()[0])


def refresh_fair_semaphore(
    conn: redis.Redis, semname: str, identifier: str, clock: Clock = time.time
) -> bool:
    """Listing 16."""
    if conn.zadd(semname, {identifier: clock()}):
        release_fair_semaphore(conn, semname, identifier)
        return False
    return True


def acquire_semaphore_with_lock(
    conn: redis.Redis, semname: str, limit: int, timeout: float = 10
) -> str | None:
    """Listing 17: the fair semaphore inside a lock taken with a 10 ms acquire timeout.

    Like the book, a failure to get the lock within 10 ms is a failure to get
    the semaphore.
    """
    identifier = acquire_lock(conn, semname, acquire_timeout=0.01)
    if identifier:
        try:
            return acquire_fair_semaphore(conn, semname, limit, timeout)
        finally:
            release_lock(conn, semname, str(identifier))
    return None
