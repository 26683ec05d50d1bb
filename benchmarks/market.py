"""Part 3: the market simulation of Redis in Action 6.2 (tables 1-3), plus our lock.

Sellers put items into their inventory and list them into the market ZSET;
buyers pick one of the ten cheapest listed items at random and buy it.  Four
ways to keep that correct:

* ``WATCH``: the book's ``list_item`` / ``purchase_item`` (optimistic; a
  WatchError is a purchase retry);
* ``coarse lock (Redis in Action)``: ``purchase_item_with_lock`` with the book's
  ``acquire_lock('market:')`` / ``release_lock`` (SETNX, 1 ms polling);
* ``fine lock (Redis in Action)``: the same, locking only the item;
* ``fine lock (celery-redislock)``: the same, with our ``RedisLock`` on the item.

The book does not print its simulation driver, so ours is the simplest one
that matches its text: listing takes the same lock as buying in the lock
modes (Redis in Action's listed counts drop when the lock is added); a purchase
that finds its item already sold returns, as in the book; an acquire that
times out (10 s) counts as a retry.  Average wait = time buyers spent in
purchase calls / items bought.  Runs are shorter than Redis in Action's 60 s.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from celery_redislock import RedisLock

from . import common, redis_in_action


@dataclass(frozen=True)
class MarketParams:
    runs: int = 5
    seconds: float = 2.5
    configs: tuple[tuple[int, int], ...] = ((1, 1), (5, 1), (5, 5))
    margin: float = 0.5


QUICK = MarketParams(runs=1, seconds=0.7)
TINY = MarketParams(runs=1, seconds=0.3, configs=((1, 1), (2, 2)), margin=0.3)

WATCH = "WATCH/MULTI"
COARSE = "coarse lock (Redis in Action)"
FINE = "fine lock (Redis in Action)"
OURS = "fine lock (celery-redislock)"
MODES = (WATCH, COARSE, FINE, OURS)


class Retry(Exception):
    """The lock could not be taken in time."""


class Keys:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.market = prefix + "market:"

    def user(self, uid: str) -> str:
        return f"{self.prefix}users:{uid}"

    def inventory(self, uid: str) -> str:
        return f"{self.prefix}inventory:{uid}"


Locker = Callable[[redis.Redis, str], Any]


def _with_book_lock(conn: redis.Redis, lockname: str, action: Callable[[], Any]) -> Any:
    identifier = redis_in_action.acquire_lock(conn, lockname)
    if not identifier:
        raise Retry
    try:
        return action()
    finally:
        redis_in_action.release_lock(conn, lockname, str(identifier))


def _with_our_lock(conn: redis.Redis, lockname: str, action: Callable[[], Any]) -> Any:
    lock = RedisLock(conn, lockname, ttl=10, prefix="bench")
    if not lock.acquire(timeout=10):
        raise Retry
    try:
        return action()
    finally:
        lock.release()


# -- Redis in Action's operations ------------------------------------------------------


def list_item_watch(conn: redis.Redis, k: Keys, itemid: str, sellerid: str, price: int) -> Any:
    """Redis in Action listing 6 (with the book's 5 s retry loop)."""
    inv = k.inventory(sellerid)
    item = f"{itemid}.{sellerid}"
    end = time.time() + 5
    pipe = conn.pipeline()
    while time.time() < end:
        try:
            pipe.watch(inv)  # type: ignore[no-untyped-call]
            if not pipe.sismember(inv, itemid):
                pipe.unwatch()
                return None
            pipe.multi()
            pipe.zadd(k.market, {item: price})
            pipe.srem(inv, itemid)
            pipe.execute()
            return True
        except redis.exceptions.WatchError:
            pass
    return False


def purchase_item_watch(
    conn: redis.Redis, k: Keys, buyerid: str, itemid: str, sellerid: str, lprice: float
) -> tuple[Any, int]:
    """Redis in Action listing 7 (with the book's 10 s retry loop); returns (result, retries)."""
    buyer, seller = k.user(buyerid), k.user(sellerid)
    item = f"{itemid}.{sellerid}"
    inventory = k.inventory(buyerid)
    end = time.time() + 10
    pipe = conn.pipeline()
    retries = 0
    while time.time() < end:
        try:
            pipe.watch(k.market, buyer)  # type: ignore[no-untyped-call]
            price = pipe.zscore(k.market, item)
            funds = int(pipe.hget(buyer, "funds") or 0)
            if price != lprice or price > funds:
                pipe.unwatch()
                return None, retries
            pipe.multi()
            pipe.hincrby(seller, "funds", int(price))
            pipe.hincrby(buyer, "funds", int(-price))
            pipe.sadd(inventory, itemid)
            pipe.zrem(k.market, item)
            pipe.execute()
            return True, retries
        except redis.exceptions.WatchError:
            retries += 1
    return False, retries


def list_item_locked(
    conn: redis.Redis,
    k: Keys,
    itemid: str,
    sellerid: str,
    price: int,
    lockname: str,
    with_lock: Any,
) -> Any:
    inv = k.inventory(sellerid)
    item = f"{itemid}.{sellerid}"

    def action() -> Any:
        pipe = conn.pipeline(True)
        pipe.zadd(k.market, {item: price})
        pipe.srem(inv, itemid)
        return pipe.execute()[-1] or None

    return with_lock(conn, lockname, action)


def purchase_item_locked(
    conn: redis.Redis,
    k: Keys,
    buyerid: str,
    itemid: str,
    sellerid: str,
    lockname: str,
    with_lock: Any,
) -> Any:
    """Redis in Action listing 9 (``purchase_item_with_lock``) with the lock passed in."""
    buyer, seller = k.user(buyerid), k.user(sellerid)
    item = f"{itemid}.{sellerid}"
    inventory = k.inventory(buyerid)

    def action() -> Any:
        pipe = conn.pipeline(True)
        pipe.zscore(k.market, item)
        pipe.hget(buyer, "funds")
        price, funds = pipe.execute()
        if price is None or price > int(funds):
            return None
        pipe.hincrby(seller, "funds", int(price))
        pipe.hincrby(buyer, "funds", int(-price))
        pipe.sadd(inventory, itemid)
        pipe.zrem(k.market, item)
        pipe.execute()
        return True

    return with_lock(conn, lockname, action)


def _lockname(mode: str, k: Keys, item: str) -> str:
    return "market:" if mode == COARSE else f"{k.prefix}item:{item}"


def _with_lock(mode: str) -> Any:
    return _with_our_lock if mode == OURS else _with_book_lock


# -- fleet workers ----------------------------------------------------------------


def seller_worker(
    url: str, mode: str, prefix: str, sellerid: str, start_at: float, stop_at: float
) -> dict[str, Any]:
    conn = common.client(url)
    k = Keys(prefix)
    conn.ping()
    common.sleep_until(start_at)
    listed = n = 0
    while time.monotonic() < stop_at or listed == 0:  # a late starter still lists one
        n += 1
        itemid = f"i{n}"
        price = random.randint(1, 100)
        conn.sadd(k.inventory(sellerid), itemid)
        if mode == WATCH:
            ok = list_item_watch(conn, k, itemid, sellerid, price)
        else:
            lockname = _lockname(mode, k, f"{itemid}.{sellerid}")
            try:
                ok = list_item_locked(conn, k, itemid, sellerid, price, lockname, _with_lock(mode))
            except Retry:
                ok = False
        listed += bool(ok)
    return {"listed": listed}


def buyer_worker(
    url: str, mode: str, prefix: str, buyerid: str, start_at: float, stop_at: float
) -> dict[str, Any]:
    conn = common.client(url)
    k = Keys(prefix)
    conn.hset(k.user(buyerid), "funds", 10**12)
    common.sleep_until(start_at)
    bought = retries = 0
    waited = 0.0
    while time.monotonic() < stop_at:
        cheapest: list[tuple[bytes, float]] = conn.zrange(  # type: ignore[assignment]
            k.market, 0, 9, withscores=True
        )
        if not cheapest:
            time.sleep(0.001)
            continue
        member, price = random.choice(cheapest)
        itemid, sellerid = member.decode().split(".", 1)
        started = time.perf_counter()
        if mode == WATCH:
            ok, tries = purchase_item_watch(conn, k, buyerid, itemid, sellerid, price)
            retries += tries
        else:
            lockname = _lockname(mode, k, member.decode())
            while True:
                try:
                    ok = purchase_item_locked(
                        conn, k, buyerid, itemid, sellerid, lockname, _with_lock(mode)
                    )
                    break
                except Retry:
                    retries += 1
        waited += time.perf_counter() - started
        bought += bool(ok)
    return {"bought": bought, "retries": retries, "waited": waited}


# -- orchestration -------------------------------------------------------------------


def measure(
    url: str, mode: str, sellers: int, buyers: int, params: MarketParams, fleet: common.Fleet
) -> dict[str, Any]:
    prefix = f"mkt{uuid.uuid4().hex[:8]}:"
    start = common.start_time(params.margin)
    stop = start + params.seconds
    jobs = [(url, mode, prefix, f"s{i}", start, stop) for i in range(sellers)]
    jobs += [(url, mode, prefix, f"b{i}", start, stop) for i in range(buyers)]
    out = fleet.run(_market_worker, [(sellers, i, job) for i, job in enumerate(jobs)])
    _cleanup(url, prefix)
    bought = sum(r.get("bought", 0) for r in out)
    waited = sum(r.get("waited", 0.0) for r in out)
    return {
        "listed": sum(r.get("listed", 0) for r in out),
        "bought": bought,
        "retries": sum(r.get("retries", 0) for r in out),
        "avg_wait_ms": 1000 * waited / bought if bought else float("nan"),
    }


def _market_worker(sellers: int, index: int, job: tuple[Any, ...]) -> dict[str, Any]:
    return seller_worker(*job) if index < sellers else buyer_worker(*job)


def _cleanup(url: str, prefix: str) -> None:
    conn = common.client(url)
    batch = []
    for key in conn.scan_iter(match=prefix + "*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            conn.unlink(*batch)
            batch.clear()
    if batch:
        conn.unlink(*batch)
    conn.delete("lock:market:")


def run(url: str, params: MarketParams, fleet: common.Fleet, log: Any = print) -> dict[str, Any]:
    """Every load and method; runs interleaved across methods."""
    raw: dict[tuple[int, int, str], list[dict[str, Any]]] = {
        (s, b, m): [] for s, b in params.configs for m in MODES
    }
    for run_no in range(params.runs):
        for (sellers, buyers, mode), runs in raw.items():
            log(f"  market: {sellers}/{buyers}, {mode} (run {run_no + 1}/{params.runs})")
            runs.append(measure(url, mode, sellers, buyers, params, fleet))
    rows = []
    for (sellers, buyers, mode), runs in raw.items():
        row = common.median_of_runs(runs)
        row.update(sellers=sellers, buyers=buyers, mode=mode)
        rows.append(row)
    return {"params": params.__dict__, "rows": rows}
