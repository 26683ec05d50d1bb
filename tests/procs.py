"""Entry points for the separate processes the core tests start (spawned, not forked)."""

from __future__ import annotations

import random
import time
from typing import Any

import redis

from celery_redislock import FairSemaphore, RedisLock


def counter_worker(url: str, prefix: str, increments: int, seed: int) -> None:
    """The lost-update experiment of the blog post "Python 分布式锁".

    Read, sleep, write back +1, all under the lock.
    """
    client = redis.Redis.from_url(url, socket_timeout=30)
    rng = random.Random(seed)
    lock = RedisLock(client, "counter", ttl=5, prefix=prefix)
    for _ in range(increments):
        with lock:
            value = int(client.get(f"{prefix}:value") or 0)
            time.sleep(rng.uniform(0, 0.002))
            client.set(f"{prefix}:value", value + 1)
            client.rpush(f"{prefix}:tokens", lock.token)  # type: ignore[arg-type]


def hold_forever(url: str, prefix: str, name: str, ttl: float, ready_key: str) -> None:
    """Take the lock, announce it, and hold it (heartbeat running) until killed."""
    client = redis.Redis.from_url(url)
    lock = RedisLock(client, name, ttl=ttl, prefix=prefix)
    assert lock.acquire(timeout=10)
    client.rpush(ready_key, lock.token)  # type: ignore[arg-type]
    while True:
        time.sleep(1)


def semaphore_worker(
    url: str, prefix: str, limit: int, rounds: int, seed: int, skew: float
) -> dict[str, Any]:
    """Contend for slots with random holds; a non-zero ``skew`` shifts this
    process's ``time.time()`` (the library must not care)."""
    if skew:
        real_time = time.time
        time.time = lambda: real_time() + skew
    client = redis.Redis.from_url(url, socket_timeout=30)
    rng = random.Random(seed)
    sem = FairSemaphore(client, "slots", limit, ttl=2, prefix=prefix)
    acquired = 0
    lost = 0
    for _ in range(rounds):
        if not sem.acquire(blocking=True, timeout=30):
            continue
        acquired += 1
        running = client.incr(f"{prefix}:running")
        client.rpush(f"{prefix}:observed", running)  # type: ignore[arg-type]
        time.sleep(rng.uniform(0, 0.01))
        client.decr(f"{prefix}:running")
        if not sem.owned():
            lost += 1
        sem.release()
    return {"acquired": acquired, "lost": lost}


def skewed_holder(
    url: str, prefix: str, limit: int, skew: float, hold: float, ttl: float = 1.0
) -> dict[str, Any]:
    """Hold one slot for ``hold`` seconds (several TTLs) with a skewed clock."""
    real_time = time.time
    time.time = lambda: real_time() + skew
    client = redis.Redis.from_url(url)
    sem = FairSemaphore(client, "skew", limit, ttl=ttl, prefix=prefix)
    got = sem.acquire()
    owned_throughout = True
    if got:
        deadline = time.monotonic() + hold
        while time.monotonic() < deadline:
            owned_throughout = owned_throughout and sem.owned()
            time.sleep(0.05)
        sem.release()
    return {"acquired": got, "owned_throughout": owned_throughout}
