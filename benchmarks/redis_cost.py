"""Redis cost per lock cycle: Redis CPU, script time and calls per acquire+release.

One process, one throwaway ``redis-server``, every contender in turn in
interleaved slices (the order rotates per slice), so that a noisy neighbour
hits all alike.  Per slice it reads ``INFO cpu`` (used_cpu_user +
used_cpu_sys of the server) and ``INFO commandstats`` before and after.

Contenders: redis-py's ``Lock``, our ``RedisLock`` and ``FairSemaphore``
(limit 5), python-redis-lock, pottery, and three floor controls: a script pair
doing the least a lock can (``SET NX PX`` in a script + GET/DEL-if-equal),
the same with owner, meta and token in one hash, and the least that keeps
our guarantees (``GUARANTEED_ACQ`` / ``GUARANTEED_REL``), by EVALSHA and, on a
server with Functions, as functions (as ours run there).

Also the contended path: ``threads`` threads share one of our locks and
acquire (blocking, FIFO) / release in a loop; Redis CPU per acquisition.

Run: ``python -m benchmarks.redis_cost [--cycles 3000] [--slices 10]``
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from celery_redislock import FairSemaphore, RedisLock
from celery_redislock.core import scripts
from celery_redislock.core.keys import LeaseKeys
from celery_redislock.core.scripts import LuaScript
from celery_redislock.testing.servers import RedisServer

from . import common
from .floors import GUARANTEED_ACQ, GUARANTEED_REL

TTL = 30

FLOOR_SET = "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])"
FLOOR_DEL = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)
# owner, meta and a token counter in one hash: HSETNX-like acquire in 2 calls... 3 in all
HASH_ACQ = """
if redis.call('HSETNX', KEYS[1], 'o', ARGV[1]) == 0 then return 0 end
local token = redis.call('HINCRBY', KEYS[1], 't', 1)
redis.call('HSET', KEYS[1], 'm', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return token
"""
HASH_REL = """
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end
return redis.call('HDEL', KEYS[1], 'o', 'm')
"""


Cycle = Callable[[], None]


def _git_lua(ref: str, name: str) -> str:
    path = f"celery_redislock/core/lua/{name}"
    return subprocess.run(
        ["git", "show", f"{ref}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _assembled_at(ref: str, name: str) -> str:
    """``name`` as of git ``ref`` with what it includes: ``--- @include
    "includes/<helper>"`` lines, or (before those) ``--- @include common.lua``."""
    old_style = re.compile(r"^--- @include (\S+\.lua)$", re.MULTILINE)
    text = _git_lua(ref, name)
    if old_style.search(text):
        parts = [_assembled_at(ref, part) for part in old_style.findall(text)]
        return "\n".join([*parts, text])
    return scripts.assembled(name, lambda part: _git_lua(ref, part))


def _scripts_at(url: str, ref: str, limit: int, label: str) -> tuple[str, Cycle]:
    """Our acquire/release scripts as of git ``ref``, called as LeaseSet calls them."""
    r = redis.Redis.from_url(url)
    acq = LuaScript("acquire.lua", _assembled_at(ref, "acquire.lua"))
    rel = LuaScript("release.lua", _assembled_at(ref, "release.lua"))
    keys = [k.encode() for k in LeaseKeys("bench", f"{label}-{uuid.uuid4().hex[:8]}").script_keys()]
    meta = '{"host": "bench", "pid": 1}'

    def cycle() -> None:
        owner = uuid.uuid4().hex
        if acq(r, keys, [owner, limit, TTL * 1000, meta, b"1", 5000]) <= 0:
            raise RuntimeError(f"{label}: not acquired")
        rel(r, keys, [owner, 5000])

    return f"{label} scripts @{ref} (limit {limit})", cycle


def _contenders(url: str, baselines: list[str]) -> dict[str, Cycle]:
    def conn() -> redis.Redis:
        return redis.Redis.from_url(url)

    base = uuid.uuid4().hex[:8]
    out: dict[str, Cycle] = {}

    rp = conn().lock(f"redispy:{base}", timeout=TTL)

    def redispy() -> None:
        rp.acquire(blocking=True)
        rp.release()

    out["redis-py Lock"] = redispy

    ours = RedisLock(conn(), f"lock-{base}", ttl=TTL, prefix="bench")

    def our_lock() -> None:
        ours.acquire()
        ours.release()

    out["ours RedisLock"] = our_lock

    sem = FairSemaphore(conn(), f"sem-{base}", 5, ttl=TTL, prefix="bench")

    def our_sem() -> None:
        sem.acquire()
        sem.release()

    out["ours FairSemaphore(5)"] = our_sem

    try:
        import redis_lock  # type: ignore[import-untyped]

        prl = redis_lock.Lock(conn(), f"prl:{base}", expire=TTL)

        def python_redis_lock() -> None:
            prl.acquire(blocking=True)
            prl.release()

        out["python-redis-lock"] = python_redis_lock
    except ImportError:
        pass
    try:
        from pottery import Redlock

        pot = Redlock(key=f"pottery:{base}", masters={conn()}, auto_release_time=TTL)

        def pottery() -> None:
            pot.acquire(blocking=True, timeout=-1)
            pot.release()

        out["pottery Redlock"] = pottery
    except ImportError:
        pass

    floor_conn = conn()

    def two_pings() -> None:  # the Celery benchmark's control: two bare round trips
        floor_conn.ping()
        floor_conn.ping()

    out["control: two PINGs"] = two_pings
    f_set = floor_conn.register_script(FLOOR_SET)
    f_del = floor_conn.register_script(FLOOR_DEL)
    fkey = f"floor:{{{base}}}"

    def floor2() -> None:
        owner = uuid.uuid4().hex
        if not f_set(keys=[fkey], args=[owner, TTL * 1000]):
            raise RuntimeError("floor control: not acquired")
        f_del(keys=[fkey], args=[owner])

    out["floor: script SET NX PX + GET/DEL"] = floor2

    h_acq = floor_conn.register_script(HASH_ACQ)
    h_rel = floor_conn.register_script(HASH_REL)
    hkey = f"hfloor:{{{base}}}"

    def floor_hash() -> None:
        owner = uuid.uuid4().hex
        if not h_acq(keys=[hkey], args=[owner, TTL * 1000, '{"host": "x", "pid": 1}']):
            raise RuntimeError("hash floor control: not acquired")
        h_rel(keys=[hkey], args=[owner])

    out["floor: one hash (owner, meta, token)"] = floor_hash

    g_acq = floor_conn.register_script(GUARANTEED_ACQ)
    g_rel = floor_conn.register_script(GUARANTEED_REL)
    gkeys = [f"gfloor:{{{base}}}:{part}" for part in ("holders", "fence", "queue")]

    def floor_guaranteed() -> None:
        owner = uuid.uuid4().hex
        if not g_acq(keys=gkeys, args=[owner, TTL * 1000, '{"host": "x", "pid": 1}']):
            raise RuntimeError("guaranteed floor control: not acquired")
        g_rel(keys=[gkeys[0], gkeys[2]], args=[owner])

    out["floor: our guarantees, holders in one hash"] = floor_guaranteed
    if int(str(floor_conn.info("server")["redis_version"]).split(".")[0]) >= 7:
        # the same floor as Redis Functions, as ours run on such a server (core/scripts.py)
        library = "#!lua name=bench_floor\n" + "".join(
            f"redis.register_function('bench_floor_{op}', function(KEYS, ARGV)\n{text}\nend)\n"
            for op, text in (("acq", GUARANTEED_ACQ), ("rel", GUARANTEED_REL))
        )
        floor_conn.function_load(library, replace=True)

        def floor_functions() -> None:
            owner = uuid.uuid4().hex
            meta = '{"host": "x", "pid": 1}'
            if not floor_conn.fcall("bench_floor_acq", 3, *gkeys, owner, TTL * 1000, meta):
                raise RuntimeError("guaranteed floor (functions): not acquired")
            floor_conn.fcall("bench_floor_rel", 2, gkeys[0], gkeys[2], owner)

        out["floor: our guarantees, as functions"] = floor_functions
    for ref in baselines:
        for limit in (1, 5):
            label, cycle = _scripts_at(url, ref, limit, "ours")
            out[label] = cycle
    return out


def _cpu(admin: redis.Redis) -> float:
    info = admin.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _stats(admin: redis.Redis) -> dict[str, tuple[int, float]]:
    out = {}
    for key, value in admin.info("commandstats").items():
        name = key.removeprefix("cmdstat_")
        if not name.startswith(("info", "config")):
            out[name] = (int(value["calls"]), float(value["usec"]))
    return out


def uncontended(
    url: str, cycles: int, slices: int, baselines: list[str]
) -> dict[str, dict[str, Any]]:
    admin = redis.Redis.from_url(url)
    contenders = _contenders(url, baselines)
    for cycle in contenders.values():  # warm up: connections, script loading
        for _ in range(20):
            cycle()
    totals: dict[str, dict[str, Any]] = {
        c: {"cycles": 0, "elapsed": 0.0, "cpu": 0.0, "calls": {}, "usec": {}} for c in contenders
    }
    order = list(contenders)
    per_slice = max(1, cycles // slices)
    for i in range(slices):
        for name in order[i % len(order) :] + order[: i % len(order)]:
            cycle, row = contenders[name], totals[name]
            s0, c0 = _stats(admin), _cpu(admin)
            started = time.perf_counter()
            for _ in range(per_slice):
                cycle()
            row["elapsed"] += time.perf_counter() - started
            c1, s1 = _cpu(admin), _stats(admin)
            row["cpu"] += c1 - c0
            row["cycles"] += per_slice
            for cmd, (calls, usec) in s1.items():
                before = s0.get(cmd, (0, 0.0))
                row["calls"][cmd] = row["calls"].get(cmd, 0) + calls - before[0]
                row["usec"][cmd] = row["usec"].get(cmd, 0.0) + usec - before[1]
    result: dict[str, dict[str, Any]] = {}
    for name, t in totals.items():
        n = t["cycles"]
        per_cycle = {c: k / n for c, k in t["calls"].items() if k}
        scripted = sum(t["calls"].get(c, 0) for c in common.SCRIPT_COMMANDS)
        result[name] = {
            "cycles": n,
            "redis_cpu_us": 1e6 * t["cpu"] / n,
            "cycles_per_s": n / t["elapsed"],
            "calls_per_cycle": per_cycle,
            "script_usec_per_call": (
                sum(t["usec"].get(c, 0.0) for c in common.SCRIPT_COMMANDS) / scripted
                if scripted
                else None
            ),
        }
    return result


def contended(url: str, threads: int, acquisitions: int) -> dict[str, Any]:
    """``threads`` threads, one RedisLock name, blocking acquire/release in a loop."""
    admin = redis.Redis.from_url(url)
    name = "contended-" + uuid.uuid4().hex[:8]
    each = max(1, acquisitions // threads)
    start = threading.Barrier(threads + 1)

    def work() -> None:
        lock = RedisLock(redis.Redis.from_url(url), name, ttl=TTL, prefix="bench")
        start.wait()
        for _ in range(each):
            lock.acquire(blocking=True, timeout=60)
            lock.release()

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    s0, c0 = _stats(admin), _cpu(admin)
    started = time.perf_counter()
    start.wait()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - started
    c1, s1 = _cpu(admin), _stats(admin)
    n = each * threads
    calls = {c: (k - s0.get(c, (0, 0.0))[0]) / n for c, (k, _) in s1.items()}
    return {
        "threads": threads,
        "acquisitions": n,
        "redis_cpu_us_per_acquisition": 1e6 * (c1 - c0) / n,
        "acquisitions_per_s": n / elapsed,
        "calls_per_acquisition": {c: v for c, v in calls.items() if v},
    }


@dataclass(frozen=True)
class CostParams:
    cycles: int = 3000
    slices: int = 10
    threads: int = 4
    contended: int = 2000


QUICK = CostParams(cycles=300, slices=3, contended=200)


def run(url: str, params: CostParams, log: Any = print) -> dict[str, Any]:
    """The ``cost`` part of ``make bench``: uncontended and contended figures."""
    log(f"  Redis cost: {params.cycles} uncontended cycles per contender")
    return {
        "params": params.__dict__,
        "uncontended": uncontended(url, params.cycles, params.slices, []),
        "contended": contended(url, params.threads, params.contended),
    }


def section(r: dict[str, Any]) -> str:
    """The markdown of the ``cost`` part (docs/benchmarks.md explains the floors)."""
    un, co = r["uncontended"], r["contended"]
    ref = un["redis-py Lock"]
    lines = [
        "### Redis cost per uncontended acquire + release (one process, interleaved slices)\n",
        "| contender | Redis CPU µs / cycle | x redis-py | script µs / call | cycles/s "
        "| x redis-py | Redis commands / cycle (incl. inside Lua) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in un.items():
        ev = row["script_usec_per_call"]
        calls = sum(v for c, v in row["calls_per_cycle"].items() if c not in common.SCRIPT_COMMANDS)
        cpu = row["redis_cpu_us"]
        lines.append(
            f"| {name} | {cpu:.1f} | {cpu / ref['redis_cpu_us']:.2f} "
            f"| {'-' if ev is None else f'{ev:.1f}'} | {row['cycles_per_s']:,.0f} "
            f"| {row['cycles_per_s'] / ref['cycles_per_s']:.2f} | {calls:.0f} |"
        )
    lines.append(
        f"\nContended ({co['threads']} threads, one lock, {co['acquisitions']} acquisitions): "
        f"{co['redis_cpu_us_per_acquisition']:.1f} µs Redis CPU per acquisition, "
        f"{co['acquisitions_per_s']:,.0f}/s.\n"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--slices", type=int, default=10)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--contended", type=int, default=2000)
    parser.add_argument("--url", help="an existing Redis (default: a throwaway redis-server)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        help="also run our acquire/release scripts as of this git ref (repeatable)",
    )
    opts = parser.parse_args(argv)
    server = None if opts.url else RedisServer().start()
    url = opts.url or server.url  # type: ignore[union-attr]
    try:
        un = uncontended(url, opts.cycles, opts.slices, opts.baseline)
        co = contended(url, opts.threads, opts.contended) if opts.contended else None
    finally:
        if server is not None:
            server.stop()
    if opts.json:
        print(json.dumps({"uncontended": un, "contended": co}, indent=1))
        return
    ref = un["redis-py Lock"]
    print(
        f"{'contender':40} {'Redis CPU us/cycle':>19} {'x redis-py':>10} "
        f"{'script us':>10} {'cycles/s':>9} {'x':>5}  calls per cycle"
    )
    for name, row in un.items():
        ev = row["script_usec_per_call"]
        calls = " ".join(f"{c}={v:.2g}" for c, v in sorted(row["calls_per_cycle"].items()))
        print(
            f"{name:40} {row['redis_cpu_us']:19.1f} "
            f"{row['redis_cpu_us'] / ref['redis_cpu_us']:10.2f} "
            f"{'-' if ev is None else f'{ev:.2f}':>10} {row['cycles_per_s']:9.0f} "
            f"{row['cycles_per_s'] / ref['cycles_per_s']:5.2f}  {calls}"
        )
    if co:
        calls = " ".join(f"{c}={v:.2g}" for c, v in sorted(co["calls_per_acquisition"].items()))
        print(
            f"contended ({co['threads']} threads, {co['acquisitions']} acquisitions): "
            f"{co['redis_cpu_us_per_acquisition']:.1f} us Redis CPU per acquisition, "
            f"{co['acquisitions_per_s']:.0f}/s; {calls}"
        )


if __name__ == "__main__":
    main()
