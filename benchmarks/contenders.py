"""Every lock and semaphore in the comparison behind one small interface.

Locks: ``acquire()`` blocks until held, ``release()`` gives it back.
Semaphores: ``acquire() -> bool`` (one attempt, or our FIFO wait where the
row says so), ``release() -> bool`` (False: the holder had lost its slot).

All locks get the same 30 s TTL (``ttl=None``: the library's default TTL);
every other option is the library default, because defaults are what users get.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import redis

from celery_redislock import FairSemaphore, RedisLock

from . import redis_in_action

TTL = 30


class Lock(Protocol):
    def __init__(self, conn: redis.Redis, name: str, ttl: float | None = TTL) -> None: ...
    def acquire(self) -> None: ...
    def release(self) -> None: ...


class Semaphore(Protocol):
    def acquire(self) -> bool: ...
    def release(self) -> bool: ...


# -- locks --------------------------------------------------------------------


class Ours:
    def __init__(self, conn: redis.Redis, name: str, ttl: float | None = TTL) -> None:
        options: dict[str, Any] = {"ttl": ttl} if ttl else {}
        self.lock = RedisLock(conn, name, prefix="bench", **options)

    def acquire(self) -> None:
        self.lock.acquire()

    def release(self) -> None:
        self.lock.release()


class RedisPy:
    """redis-py's ``redis.lock.Lock``: SET NX PX, polls every 0.1 s (default ``sleep``)."""

    def __init__(self, conn: redis.Redis, name: str, ttl: float | None = TTL) -> None:
        self.lock = conn.lock("redispy:" + name, timeout=ttl)

    def acquire(self) -> None:
        if not self.lock.acquire(blocking=True):
            raise RuntimeError("redis-py Lock.acquire(blocking=True) returned False")

    def release(self) -> None:
        self.lock.release()


class PythonRedisLock:
    """python-redis-lock: SET NX EX, waiters BLPOP a signal list."""

    def __init__(self, conn: redis.Redis, name: str, ttl: float | None = TTL) -> None:
        import redis_lock  # type: ignore[import-untyped]

        self.lock = redis_lock.Lock(conn, "prl:" + name, expire=ttl)

    def acquire(self) -> None:
        if not self.lock.acquire(blocking=True):
            raise RuntimeError("redis_lock.Lock.acquire(blocking=True) returned False")

    def release(self) -> None:
        self.lock.release()


class Pottery:
    """pottery's ``Redlock`` with one master: retries after a random 0-0.2 s sleep."""

    def __init__(self, conn: redis.Redis, name: str, ttl: float | None = TTL) -> None:
        from pottery import Redlock

        options: dict[str, Any] = {"auto_release_time": ttl} if ttl else {}
        self.lock = Redlock(key="pottery:" + name, masters={conn}, **options)

    def acquire(self) -> None:
        if not self.lock.acquire(blocking=True, timeout=-1):
            raise RuntimeError("Redlock.acquire(blocking=True) returned False")

    def release(self) -> None:
        self.lock.release()


class BookLock:
    """Redis in Action 6.2: ``acquire_lock_with_timeout`` + ``release_lock``.

    SETNX, then EXPIRE, polling every 1 ms.
    """

    def __init__(self, conn: redis.Redis, name: str, ttl: float | None = TTL) -> None:
        self.conn = conn
        self.name = "book:" + name
        self.identifier = ""
        self.options = {"lock_timeout": ttl} if ttl else {}

    def acquire(self) -> None:
        while True:  # the book's version gives up after acquire_timeout (10 s); we ask again
            got = redis_in_action.acquire_lock_with_timeout(self.conn, self.name, **self.options)
            if got:
                self.identifier = str(got)
                return

    def release(self) -> None:
        redis_in_action.release_lock(self.conn, self.name, self.identifier)


OURS = "celery-redislock RedisLock"
LOCKS: dict[str, type[Lock]] = {
    OURS: Ours,
    "redis-py Lock": RedisPy,
    "python-redis-lock": PythonRedisLock,
    "pottery Redlock (1 master)": Pottery,
    "Redis in Action acquire_lock_with_timeout": BookLock,
}


# -- semaphores -----------------------------------------------------------------


class OursSemaphore:
    """``FairSemaphore``, one non-blocking attempt (the benchmark retries after 1 ms)."""

    blocking = False

    def __init__(self, conn: redis.Redis, name: str, limit: int) -> None:
        self.sem = FairSemaphore(conn, name, limit, ttl=TTL, prefix="bench")

    def acquire(self) -> bool:
        if self.blocking:
            return self.sem.acquire(blocking=True, timeout=1.0)
        return self.sem.acquire()

    def release(self) -> bool:
        try:
            self.sem.release()
        except Exception:
            return False
        return True


class OursSemaphoreBlocking(OursSemaphore):
    """``FairSemaphore`` with ``acquire(blocking=True)``: FIFO queue, slots handed over."""

    blocking = True


class _BookSemaphore:
    acquire_func: Any = None
    release_func: Any = None

    def __init__(self, conn: redis.Redis, name: str, limit: int) -> None:
        self.conn, self.name, self.limit = conn, "booksem:" + name, limit
        self.identifier: str | None = None

    def acquire(self) -> bool:
        self.identifier = type(self).acquire_func(self.conn, self.name, self.limit, TTL)
        return self.identifier is not None

    def release(self) -> bool:
        assert self.identifier is not None
        return bool(type(self).release_func(self.conn, self.name, self.identifier))


class BookBasicSemaphore(_BookSemaphore):
    acquire_func = staticmethod(redis_in_action.acquire_semaphore)
    release_func = staticmethod(redis_in_action.release_semaphore)


class BookFairSemaphore(_BookSemaphore):
    acquire_func = staticmethod(redis_in_action.acquire_fair_semaphore)
    release_func = staticmethod(redis_in_action.release_fair_semaphore)


class BookSemaphoreWithLock(_BookSemaphore):
    acquire_func = staticmethod(redis_in_action.acquire_semaphore_with_lock)
    release_func = staticmethod(redis_in_action.release_fair_semaphore)


OURS_SEM = "celery-redislock FairSemaphore"
OURS_SEM_BLOCKING = "celery-redislock FairSemaphore (blocking, FIFO)"
BOOK_WITH_LOCK = "Redis in Action acquire_semaphore_with_lock"
SEMAPHORES: dict[str, Callable[[redis.Redis, str, int], Semaphore]] = {
    OURS_SEM: OursSemaphore,
    OURS_SEM_BLOCKING: OursSemaphoreBlocking,
    "Redis in Action acquire_semaphore": BookBasicSemaphore,
    "Redis in Action acquire_fair_semaphore": BookFairSemaphore,
    BOOK_WITH_LOCK: BookSemaphoreWithLock,
}


class NoLimit:
    """Grants every request: not a contender, a check that over-limit detection fires."""

    def __init__(self, conn: redis.Redis, name: str, limit: int) -> None:
        pass

    def acquire(self) -> bool:
        return True

    def release(self) -> bool:
        return True


NO_LIMIT = "no limit (detector check)"
CHECKS: dict[str, Callable[[redis.Redis, str, int], Semaphore]] = {NO_LIMIT: NoLimit}
