"""Every Lua script's header is true: the KEYS and ARGV its callers pass are
the ones it declares.

Each script is called the way the package calls it (a lock, a semaphore with
a waiter, renewal, inspection, dedupe markers, fencing, a park's whole
life, the sweeper's index read, process statements), with every call
recorded; the counts are then compared with the header of the script's own
file (``KEYS[n]`` / ``ARGV[n]`` lines, or "the seven keys of includes/lease_set_keys.lua").
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_redislock import FairSemaphore, Overrides, RateLimiter, RedisLock
from celery_redislock.core import liveness, scripts
from celery_redislock.core.capacity import Capacity
from celery_redislock.core.fencing import FencedResource
from celery_redislock.core.heartbeat import HEARTBEAT
from celery_redislock.core.inspection import inspect_names
from celery_redislock.core.keys import LeaseKeys, limits_to_wake
from celery_redislock.core.park import ParkConfig, Parking, due_names, wake
from celery_redislock.core.rate import NO_RATE
from celery_redislock.core.replication import acknowledged_by
from celery_redislock.enqueue import dedupe
from celery_redislock.parking import promotion
from tests.waiting import wait_for

LUA = Path(scripts.__file__).parent / "lua"
NUMBERS = {"seven": 7, "nineteen": 19}


def declared(name: str) -> tuple[set[int] | None, set[int] | None]:
    """(key counts, arg counts) the header of ``name`` allows; None: any."""
    header = LUA.joinpath(name).read_text().split("\n\n", 1)[0]
    keys: set[int] | None
    shared = re.search(r"^-- KEYS: the (\w+) keys of ([\w/]+\.lua)", header, re.MULTILINE)
    if shared:
        count = NUMBERS[shared.group(1)]
        # The park scripts leave the two indexes and the total out on a cluster;
        # "and KEYS[n] ... (optional": the lease set's index of held names.
        keys = {count, count - 3} if shared.group(2) == "includes/park_keys.lua" else {count}
        extras = re.findall(r"and KEYS\[(\d+)\] \w+( \(optional)?", header)
        required = [int(n) for n, optional in extras if not optional]
        if required:  # keys every call passes after the shared ones
            keys = {max(required)}
        keys |= {int(n) for n, optional in extras if optional}
    elif re.search(r"^-- KEYS: for lease i", header, re.MULTILINE):
        keys = None
    else:
        keys = {max(map(int, re.findall(r"^--\s+KEYS\[(\d+)\]", header, re.MULTILINE)))}
        optional = re.findall(r"^--\s+KEYS\[(\d+)\]\s+\w+\s+\w+\s+optional", header, re.MULTILINE)
        keys |= {int(n) - 1 for n in optional}
    args: set[int] | None
    if re.search(r"^-- ARGV: none", header, re.MULTILINE):
        args = {0}
    elif re.search(r"^-- ARGV(: for lease i|\[1\.\.n\])", header, re.MULTILINE):
        args = None
    else:
        args = {max(map(int, re.findall(r"^--\s+ARGV\[(\d+)\]", header, re.MULTILINE)))}
    return keys, args


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int, int]]]:
    recorded: list[tuple[str, int, int]] = []
    call, pipelined = scripts.LuaScript.__call__, scripts.LuaScript.pipelined

    def recording_call(self: Any, client: Any, keys: Any, args: list[Any]) -> Any:
        recorded.append((self.name, len(keys), len(args)))
        return call(self, client, keys, args)

    def recording_pipelined(self: Any, client: Any, batch: list[tuple[Any, list[Any]]]) -> Any:
        recorded.extend((self.name, len(keys), len(args)) for keys, args in batch)
        return pipelined(self, client, batch)

    monkeypatch.setattr(scripts.LuaScript, "__call__", recording_call)
    monkeypatch.setattr(scripts.LuaScript, "pipelined", recording_pipelined)
    yield recorded


def test_every_script_is_called_with_the_keys_and_args_its_header_declares(
    redis_client: Any, prefix: str, calls: list[tuple[str, int, int]]
) -> None:
    name = f"hdr-{uuid.uuid4().hex[:8]}"
    lock = RedisLock(redis_client, name, ttl=5, prefix=prefix)
    assert lock.acquire()
    assert lock.refresh()
    inspect_names(redis_client, prefix, [name])
    assert FencedResource(redis_client, f"{prefix}:res:{name}").write(lock.token, "v")
    assert FencedResource(redis_client, f"{prefix}:res:{name}").read(lock.token) == b"v"
    acknowledged_by(redis_client, LeaseKeys(prefix, name).fence, 0, 10)
    # acknowledged_by sends touch_fence.lua as a plain EVAL of 1 key, 1 arg.
    assert declared("touch_fence.lua") == ({1}, {1})
    keys = LeaseKeys(prefix, name)
    scripts.REFRESH_PREFIX(redis_client, [keys.holders, keys.info], ["no-such-owner"])
    indexed = LeaseKeys(prefix, name, indexed=True)
    scripts.REFRESH_PREFIX(redis_client, indexed.refresh_keys(), ["no-such-owner"])
    listed = RedisLock(redis_client, f"{name}-i", ttl=5, prefix=prefix, index=True)
    assert listed.acquire() and listed.refresh() and listed.holders()
    listed.release()
    space, me = liveness.process_space(), liveness.identity()
    if space is not None and me is not None:  # Linux: process statements
        liveness.Recorder().state(space, me, HEARTBEAT.leases())
        liveness.last_statements(redis_client, prefix, [f"{space}/{me}"])
        liveness.forget(redis_client, prefix, me)
    lock.release()
    assert dedupe.claim(redis_client, prefix, name, "a.task", "t0", 5) is None
    assert dedupe.clear(redis_client, prefix, name, "a.task", "t0")

    first = FairSemaphore(redis_client, f"{name}-s", 1, ttl=5, prefix=prefix)
    second = FairSemaphore(redis_client, f"{name}-s", 1, ttl=5, prefix=prefix)
    assert first.acquire()
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(second.acquire(blocking=True, timeout=30)))
    waiter.start()
    wait_for(lambda: len(first.waiters()) == 1, 30, message="the second one queued")
    first.release()
    waiter.join(30)
    assert got == [True]
    second.release()

    park = Parking(redis_client, prefix, f"{name}-p")
    config = ParkConfig(deadline=5)
    reserved = park.enqueue("t1", Capacity.semaphore(1), "{}", 0, config, "task")
    second = park.enqueue("t2", Capacity.semaphore(1), "{}", 0, config, "task")
    assert second.count == 1 and second.guard.startswith("k")  # t2's guard, for its PARKED
    park.free_state("t2", second.guard)
    held = park.claim("t1", str(reserved.token), "owner.1", 5, "{}", Capacity.semaphore(1), "task")
    assert held.token > 0
    released, promotions = park.release("owner.1", Capacity.semaphore(1), config, "task")
    assert released and [p.task_id for p in promotions] == ["t2"]
    # the promotion took t2's state guard for its PROMOTED, named by its token (exact)
    assert promotions[0].guard == f"p{promotions[0].token}"
    assert redis_client.get(f"{prefix}:{{{name}-p}}:state:t2") == promotions[0].guard.encode()
    park.free_state("t2", promotions[0].guard)
    park.promote(Capacity.semaphore(1), config, "task")
    parked = park.arrive("t3", Capacity.semaphore(1), "{}", 0, config, "owner.3", 5, "{}", "task")
    assert parked.guard  # the arrival took t3's state guard for its PARKED
    assert park.hold_state("t3", "w1", "parked", 5) == 0  # held: wait
    park.free_state("t3", parked.guard)
    assert park.hold_state("t3", "w1", "parked", 5) == 1  # t3 is parked: write
    assert park.hold_state("t3", "w2", "", 5) == 0  # w1 holds it: wait
    park.free_state("t3", "w1")
    assert park.hold_state("t3", "w2", "inflight", 5) == -1  # not in flight: do not write
    assert park.hold_state("t3", "w2", "", 5) == 1  # a final state: always
    park.free_state("t3", "w2")
    kept = ParkConfig(deadline=5, keep_latest=True, debounce=0.5, supersede=True)
    park.arrive("t4", Capacity.semaphore(1), "{}", 0, kept, "owner.4", 5, "{}", "task")
    assert park.try_hold(Capacity.semaphore(1), "owner.5", 5, "{}", NO_RATE).verdict.value == "full"
    assert park.park_at_head("t5", Capacity.semaphore(1), "{}", 0, 0.1, "task", NO_RATE).count
    held_back = park.park_at_head(
        "t6", Capacity.semaphore(1), "{}", 0, 0, "task", NO_RATE, hold=5, waits_for=f"{name}-l"
    )
    assert held_back.count and held_back.wait == 0  # held, not paused
    park.unhold(config, f"{name}-l", 5)
    assert park.hold_for(f"{name}-l", 5)
    limit_keys = LeaseKeys(prefix, f"{name}-l")
    blocked = limit_keys.blocked_keys()
    lease_keys = limit_keys.lease_keys()
    other = FairSemaphore(redis_client, f"{name}-l", 1, ttl=5, prefix=prefix)
    assert other.acquire()  # full: the name is noted
    noted = [f"{name}-p", 1, 60_000, 0, 1, 0]
    assert scripts.LIMIT_BLOCK(redis_client, [*lease_keys, *blocked], noted)
    other.release()
    woken = scripts.LIMIT_WAKE(redis_client, [*lease_keys, *blocked], ["", 60_000, ""])
    assert woken == [f"{name}-p".encode(), 1, 1, 0]  # noted again
    assert scripts.LIMIT_FORGET(redis_client, blocked, [f"{name}-p", 60_000]) == 1
    for index in (False, True):  # the held index: on a single server only
        shared = FairSemaphore(redis_client, f"{name}-l", 1, ttl=5, prefix=prefix, index=index)
        assert shared.acquire()
        woken_by_release: list[Any] = []
        promotion.release_listed(shared, woken_by_release)
        assert woken_by_release == []  # nobody noted
    park.status(count=10)
    park.drop("t2")
    assert park.where("t2", "1") == ("", "")
    due_names(redis_client, prefix)
    wake(redis_client, prefix, f"{name}-p")

    limiter = RateLimiter(redis_client, name, rate="10/s", burst=2, prefix=prefix)
    assert limiter.try_acquire(2) and not limiter.peek()
    limiter.pause(1)
    limiter.resume()
    overrides = Overrides(redis_client, name, prefix)
    assert overrides.set(limit=3, rate="5/s").limit == 3
    assert overrides.clear("rate").rate is None
    assert not overrides.clear()
    changed = scripts.LIMIT_CHANGED_TAKE(redis_client, [limits_to_wake(prefix)], [100])
    assert name.encode() in changed  # noted by each change, taken once
    assert scripts.LIMIT_CHANGED_TAKE(redis_client, [limits_to_wake(prefix)], [100]) == []

    called = {script for script, _, _ in calls}
    lua_files = {p.name for p in LUA.glob("*.lua")}
    lua_files -= {"touch_fence.lua"}
    if liveness.process_space() is None:
        lua_files -= {"live_register.lua", "live_list.lua", "live_forget.lua"}
    assert lua_files - called == set(), "scripts this test does not call"
    for script, n_keys, n_args in calls:
        keys, args = declared(script)
        assert keys is None or n_keys in keys, f"{script}: {n_keys} keys, header says {keys}"
        assert args is None or n_args in args, f"{script}: {n_args} args, header says {args}"
