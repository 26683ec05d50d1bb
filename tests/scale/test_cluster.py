"""Locks and semaphores on a real 3-master Redis Cluster (local redis-server processes)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from celery_redislock import HEARTBEAT, FairSemaphore, LockLost, NotReplicated, RedisLock, settings
from celery_redislock.core.acl import acl_rules
from celery_redislock.core.connection import client_from_url
from celery_redislock.core.heartbeat import refresh_leases
from celery_redislock.core.keys import held_index, park_index
from devtools.engines import LocalCluster
from tests.celery_harness import celery_worker_factory  # noqa: F401 (fixture)
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3, replicas=1) as local:
        yield local


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Any]:
    cl = client_from_url(cluster.url)
    yield cl
    cl.close()


def masters(cluster: LocalCluster) -> list[redis.Redis]:
    return [redis.Redis(port=port, socket_timeout=10) for port in cluster.master_ports()]


def names_on_every_master(client: Any, prefix: str, count: int = 30) -> list[str]:
    names = [f"job-{i}" for i in range(count)]
    nodes = {client.get_node_from_key(f"{prefix}:{{{n}}}:holders").name for n in names}
    assert len(nodes) == 3, "test names should spread over all three masters"
    return names


def test_cluster_url_and_option_both_give_a_cluster_client(cluster: LocalCluster) -> None:
    by_scheme = client_from_url(cluster.url)
    by_option = client_from_url(f"redis://127.0.0.1:{cluster.ports[0]}/0", {"cluster": True})
    for cl in (by_scheme, by_option):
        assert isinstance(cl, redis.RedisCluster)
        assert len(cl.get_primaries()) == 3
        cl.close()


def test_locks_spread_over_all_masters_each_in_one_slot(
    client: Any, cluster: LocalCluster, prefix: str
) -> None:
    locks = [
        # index=True (as the Celery layer builds them) is ignored on a cluster:
        # the index of held names would live in another slot.
        RedisLock(client, n, prefix=prefix, ttl=10, index=True)
        for n in names_on_every_master(client, prefix)
    ]
    for lock in locks:
        assert lock.acquire(blocking=False)
    try:
        holders_per_master = []
        for node in masters(cluster):
            keys = [k.decode() for k in node.scan_iter(match=f"{prefix}:*", count=1000)]
            holders_per_master.append([k for k in keys if k.endswith(":holders")])
            for key in keys:  # every key lives on the node that owns its slot
                assert (
                    client.get_node_from_key(key).port
                    == node.connection_pool.connection_kwargs["port"]
                )
        assert all(holders_per_master), f"a master holds no lock: {holders_per_master}"
        assert not client.exists(held_index(prefix))
        for lock in locks:
            assert len(lock.keys.script_keys()) == 7  # no index
            slots = {client.keyslot(k) for k in lock.keys.script_keys()[:5]}
            slots.add(client.keyslot(lock.keys.wake("x")))
            assert len(slots) == 1
        assert not RedisLock(client, locks[0].name, prefix=prefix).acquire(blocking=False)
        assert [h.token for h in locks[5].holders()] == [locks[5].token]
    finally:
        for lock in locks:
            lock.release()
    assert all(not lock.locked() for lock in locks)


def test_semaphore_never_exceeds_its_limit_on_the_cluster(client: Any, prefix: str) -> None:
    limit, workers, rounds = 3, 8, 15
    inside, peak, guard = [0], [0], threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(rounds):
                sem = FairSemaphore(client, "pool", limit, prefix=prefix, ttl=5)
                if not sem.acquire(blocking=True, timeout=30):
                    raise AssertionError("waited 30 s for a slot")
                with guard:
                    inside[0] += 1
                    peak[0] = max(peak[0], inside[0])
                time.sleep(0.002)
                with guard:
                    inside[0] -= 1
                sem.release()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert peak[0] == limit  # reached, never exceeded
    assert FairSemaphore(client, "pool", limit, prefix=prefix).holders() == []


def test_blocking_acquire_is_woken_fifo_on_the_keys_node(client: Any, prefix: str) -> None:
    """BLPOP on the waiter's wake list goes to the node of the lock's slot."""
    holder = RedisLock(client, "queue", prefix=prefix, ttl=30)
    assert holder.acquire()
    order: list[int] = []
    waiters = [RedisLock(client, "queue", prefix=prefix, ttl=30) for _ in range(3)]

    def wait(i: int) -> None:
        if waiters[i].acquire(timeout=60):
            order.append(i)
            waiters[i].release()

    threads = []
    for i in range(3):
        threads.append(threading.Thread(target=wait, args=(i,)))
        threads[-1].start()
        wait_for(lambda i=i: len(holder.waiters()) == i + 1, 30, message=f"waiter {i} queued")
    token = holder.token
    holder.release()
    for t in threads:
        t.join(60)
    assert order == [0, 1, 2]
    assert all(w.token is None for w in waiters)
    assert token is not None


def test_renewal_is_one_pipeline_per_master_and_survives_script_flush(
    client: Any, cluster: LocalCluster, prefix: str
) -> None:
    locks = [
        RedisLock(client, n, prefix=prefix, ttl=0.6) for n in names_on_every_master(client, prefix)
    ]
    for lock in locks:
        assert lock.acquire(blocking=False)
    try:
        for node in masters(cluster):
            node.script_flush()  # e.g. a restarted or newly promoted primary
        pipelines: list[str] = []
        real = client.get_redis_connection
        this_thread = threading.current_thread()

        def counting(node: Any) -> Any:
            if threading.current_thread() is this_thread:  # not the heartbeat's own beats
                pipelines.append(node.name)
            return real(node)

        client.get_redis_connection = counting
        try:
            remaining = refresh_leases(client, [lock.lease for lock in locks])  # type: ignore[misc]
        finally:
            del client.get_redis_connection
        assert all(ms > 0 for ms in remaining)
        assert sorted(pipelines) == sorted({n.name for n in client.get_primaries()})
        # The heartbeat keeps all of them alive well past their ttl.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert all(lock.owned() for lock in locks)
            time.sleep(0.05)
        for lock in locks:
            assert lock.refresh()
    finally:
        for lock in locks:
            lock.release()


def test_status_and_release_list_and_free_holders_on_every_master(
    client: Any, cluster: LocalCluster, prefix: str
) -> None:
    """The inspection CLI reads each name's holders on its own node (redis-py's
    cluster pipeline refuses scripts), and ``release`` frees a held lock."""
    from click.testing import CliRunner

    from celery_redislock.admin.cli import redislock

    names = names_on_every_master(client, prefix, count=6)
    locks = [RedisLock(client, n, prefix=prefix, ttl=30) for n in names]
    assert all(lock.acquire(blocking=False) for lock in locks)
    try:
        base = ["--url", cluster.url, "--prefix", prefix]
        shown = CliRunner().invoke(redislock, ["status", "--json", *base])
        assert shown.exit_code == 0, shown.output
        listed = {row["name"] for row in json.loads(shown.output)["lease_sets"]}
        assert listed == set(names), shown.output
        top = CliRunner().invoke(redislock, ["status", "--top", "3", *base])
        assert top.exit_code == 0, top.output
        freed = CliRunner().invoke(redislock, ["release", names[0], "--force", *base])
        assert freed.exit_code == 0, freed.output
        again = RedisLock(client, names[0], prefix=prefix)
        assert again.acquire(blocking=False)
        again.release()
    finally:
        for lock in locks[1:]:
            lock.release()


def test_a_lost_lease_is_reported_on_the_cluster(client: Any, prefix: str) -> None:
    lost: list[Any] = []
    lock = RedisLock(client, "victim", prefix=prefix, ttl=0.6, on_lost=lost.append)
    assert lock.acquire()
    client.delete(lock.keys.holders)
    wait_for(lambda: lost, 10, message="on_lost after the holders key vanished")
    assert not lock.owned()
    other = RedisLock(client, "victim", prefix=prefix)
    assert other.acquire(blocking=False)
    assert other.token is not None and lock.token is not None and other.token > lock.token
    with pytest.raises(LockLost):
        lock.release()
    other.release()


def test_no_keys_select_or_cross_slot_commands_reach_the_cluster(
    client: Any, cluster: LocalCluster, prefix: str
) -> None:
    for node in masters(cluster):
        node.config_resetstat()
    for name in names_on_every_master(client, prefix, 12):
        sem = FairSemaphore(client, name, 2, prefix=prefix, ttl=5)
        with sem:
            sem.refresh()
            sem.holders()
            sem.waiters()
    for node in masters(cluster):
        commands = node.info("commandstats")
        errors = node.info("errorstats")
        assert "cmdstat_evalsha" in commands
        assert not {"cmdstat_keys", "cmdstat_select"} & set(commands), commands
        assert not any("CROSSSLOT" in e or "MOVED" in e for e in errors), errors


def test_replica_acknowledgement_goes_to_the_keys_primary(client: Any, prefix: str) -> None:
    names = names_on_every_master(client, prefix, 12)
    wait_for(
        lambda: all(
            node.redis_connection.info("replication").get("connected_slaves") == 1
            for node in client.get_primaries()
        ),
        30,
        message="every primary to have its replica",
    )
    for name in names:
        lock = RedisLock(client, name, prefix=prefix, replicas=1, replica_timeout=5)
        assert lock.acquire(blocking=False)
        lock.release()
    greedy = RedisLock(client, names[0], prefix=prefix, replicas=2, replica_timeout=0.1)
    with pytest.raises(NotReplicated, match="only 1 of the 2 replicas"):
        greedy.acquire(blocking=False)
    assert not greedy.locked() and greedy.lease is None


def test_a_restricted_acl_user_works_on_the_cluster(cluster: LocalCluster, prefix: str) -> None:
    for port in cluster.ports:
        admin = redis.Redis(port=port)
        admin.execute_command(
            "ACL", "SETUSER", "locks", "reset", "on", ">pw", *acl_rules(prefix, cluster=True)
        )
    restricted = client_from_url(cluster.url.replace("://", "://locks:pw@"))
    for name in names_on_every_master(restricted, prefix, 12):
        lock = RedisLock(restricted, name, prefix=prefix, ttl=5)
        assert lock.acquire()
        assert lock.refresh()
        assert lock.holders()[0].token == lock.token
        lock.release()
    restricted.close()


def test_leases_survive_a_cluster_failover(client: Any, cluster: LocalCluster, prefix: str) -> None:
    """CLUSTER FAILOVER (coordinated) of one shard while leases on every master are held.

    The old primary answers MOVED to renewals; the heartbeat follows the
    redirection, and later beats group the leases by the new primary.  Runs
    last in this module: it changes the cluster's topology.
    """
    locks = [
        RedisLock(client, n, prefix=prefix, ttl=1.5) for n in names_on_every_master(client, prefix)
    ]
    for lock in locks:
        assert lock.acquire(blocking=False)
    old_primaries = set(cluster.master_ports())
    replica_port = next(p for p in cluster.ports if p not in old_primaries)
    replica = redis.Redis(port=replica_port, socket_timeout=10)
    wait_for(
        lambda: replica.info("replication").get("master_link_status") == "up",
        30,
        message="the replica to be in sync",
    )
    replica.execute_command("CLUSTER FAILOVER")
    wait_for(lambda: replica_port in cluster.master_ports(), 30, message="the replica promoted")
    beats = HEARTBEAT.beats
    wait_for(lambda: HEARTBEAT.beats >= beats + 4, 30, message="four heartbeats")
    assert all(lock.owned() for lock in locks)
    for lock in locks:
        assert lock.refresh()
        assert not RedisLock(client, lock.name, prefix=prefix).acquire(blocking=False)
        lock.release()
    fresh = RedisLock(client, locks[0].name, prefix=prefix)
    assert fresh.acquire(blocking=False)
    fresh.release()


def test_park_on_a_cluster_with_a_real_worker(
    cluster: LocalCluster,
    client: Any,
    redis_url: str,
    celery_worker_factory: Any,  # noqa: F811
) -> None:
    """``park`` with the lock Redis on a cluster: each name's park keys sit in
    its lease set's slot, the index (its own slot) follows every call, and
    every task runs once within the limit."""
    from celery_redislock.core.park import Parking
    from tests.celery.test_scenarios import max_overlap
    from tests.celery_apps.basic import create_app

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    config = {"redis": redis_url, "lock_redis": cluster.url, "prefix": prefix, "park_sweep": "0.5"}
    app = create_app(config)
    task = app.tasks["basic.parked"]
    keys = [f"k{uuid.uuid4().hex[:8]}" for _ in range(6)]
    names = [f"park:{k}" for k in keys]
    assert len({client.keyslot(f"{prefix}:{{{n}}}:park") for n in names}) > 1
    celery_worker_factory(config, pool="prefork", concurrency=6)
    results = {k: [task.delay(k, n, 120, True) for n in range(5)] for k in keys[:3]}
    index = park_index(prefix)
    for k, name in zip(keys[:3], names[:3], strict=True):
        park_keys = [f"{prefix}:{{{name}}}:{part}" for part in ("holders", "park", "parked")]
        assert len({client.keyslot(key) for key in park_keys}) == 1
        wait_for(lambda k=k: len(app.recorder.events("parked", k)) == 2, 60, message="2 running")
        assert Parking(client, prefix, name).status().parked == 3
        assert client.zscore(index, name) is not None
    for k in keys[:3]:
        app.recorder.client.set(f"{prefix}:gate:{k}", 1, ex=600)
    for k in keys[:3]:
        for r in results[k]:
            r.get(timeout=120)
        starts = [e for e in app.recorder.events("parked", k) if e["what"] == "start"]
        assert sorted(e["n"] for e in starts) == list(range(5)), "each ran once"
        assert max_overlap(app.recorder.events("parked", k)) <= 2
    wait_for(
        lambda: all(client.zscore(index, n) is None for n in names[:3]), 30, message="index emptied"
    )
    app.conf.redislock_park_max_total = 10
    settings.reset()  # settings are parsed once per app and process: read them again
    with pytest.raises(ValueError, match="single Redis server"):
        for n in range(3):
            task.delay(keys[3], n)


def test_the_park_index_keeps_each_names_due_time_on_the_cluster(client: Any) -> None:
    """On a cluster the index (its own slot) is kept by the caller from each
    park script's reply.  Only the scripts that may leave work on a name that
    had none register the name first; a claim or a release finds it indexed
    already, and still moves its due time (earlier too: a claimed lease ends
    before the reservation it replaces would have lapsed)."""
    from celery_redislock.core.capacity import Capacity
    from celery_redislock.core.park import ParkConfig, Parking

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    index, name, one = park_index(prefix), "acct:idx", Capacity.semaphore(1)
    parking, config = Parking(client, prefix, name), ParkConfig(deadline=60)

    def now_ms() -> int:
        seconds, micros = client.get_node_from_key(
            f"{prefix}:{{{name}}}:park"
        ).redis_connection.time()
        return int(seconds) * 1000 + int(micros) // 1000

    before = now_ms()
    first = parking.enqueue("a", one, "{}", 0, config, "t")
    assert first.token  # reserved: in flight until its claim, due at its deadline
    deadline = client.zscore(index, name)
    assert before + 60_000 <= deadline <= now_ms() + 60_000
    parked = parking.enqueue("b", one, "{}", 0, config, "t")
    assert parked.count == 1
    parking.free_state("b", parked.guard)
    held = parking.claim("a", str(first.token), "owner.a", 5, "{}", one, "t")
    assert held.token > 0
    claimed_at = now_ms()
    # due when a's 5 s lease ends (a holder that dies frees its slot then): earlier than before
    assert claimed_at - 1000 <= client.zscore(index, name) - 5_000 <= claimed_at
    released, promotions = parking.release("owner.a", one, config, "t")
    assert released and [p.task_id for p in promotions] == ["b"]
    assert client.zscore(index, name) >= now_ms() + 59_000  # b's reservation deadline
    b = parking.claim("b", str(promotions[0].token), "owner.b", 5, "{}", one, "t")
    assert b.token > 0
    assert client.zscore(index, name) is None  # nothing parked or in flight: out of the index
    released, promotions = parking.release("owner.b", one, config, "t")
    assert released and promotions == []
    assert client.zscore(index, name) is None  # a release with nothing before it adds nothing


def test_a_claim_and_a_release_update_the_park_index_once_on_the_cluster(
    cluster: LocalCluster, client: Any
) -> None:
    """Round trips to the index on a cluster: a call that may leave work on an
    unindexed name registers it first and re-scores it after (two); a claim
    and a release re-score only (one each), and a release with nothing
    parked or in flight before it none."""
    from celery_redislock.core.capacity import Capacity
    from celery_redislock.core.park import ParkConfig, Parking

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    index = park_index(prefix)
    index_node = client.get_node_from_key(index)
    name = next(
        n
        for n in names_on_every_master(client, prefix)
        if client.get_node_from_key(f"{prefix}:{{{n}}}:park").name != index_node.name
    )
    node = redis.Redis(host=index_node.host, port=index_node.port)
    parking, one, config = Parking(client, prefix, name), Capacity.semaphore(1), ParkConfig()

    def index_writes() -> int:
        stats = node.info("commandstats")
        return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("zadd", "zrem"))

    def writes_of(call: Any) -> tuple[Any, int]:
        before = index_writes()
        result = call()
        return result, index_writes() - before

    reserved, enqueue_writes = writes_of(lambda: parking.enqueue("a", one, "{}", 0, config, "t"))
    assert reserved.token and enqueue_writes == 2
    claim = lambda: parking.claim("a", str(reserved.token), "o.a", 5, "{}", one, "t")  # noqa: E731
    held, claim_writes = writes_of(claim)
    assert held.token > 0 and claim_writes == 1
    (released, _), release_writes = writes_of(lambda: parking.release("o.a", one, config, "t"))
    assert released and release_writes == 0  # the claim took it out of the index already
    node.close()


def test_late_index_writes_on_the_cluster_leave_it_true(client: Any) -> None:
    """The index writes after park scripts are not ordered across processes:
    a due time that lands after a later script emptied the name does not put
    it back, a removal that lands after new work came in does not hide that
    work from the sweepers, and a removal whose process died before its check
    is mended by the next call on the name."""
    from celery_redislock.core.capacity import Capacity
    from celery_redislock.core.park import ParkConfig, Parking

    class Late(Parking):
        """Holds back its index writes until ``land()``, as a process
        descheduled between a script's reply and its index write would."""

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.held: list[tuple[Any, int]] = []

        def _follow(self, script: Any, due: int) -> None:
            self.held.append((script, due))

        def land(self) -> None:
            for script, due in self.held:
                super()._follow(script, due)
            self.held.clear()

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    index = park_index(prefix)
    name = f"park:{uuid.uuid4().hex[:8]}"
    prompt, late = Parking(client, prefix, name), Late(client, prefix, name)
    two, config = Capacity.semaphore(2), ParkConfig()
    first, second = (prompt.enqueue(t, two, "{}", 0, config, "t") for t in ("a", "b"))
    assert first.token and second.token and client.zscore(index, name) is not None
    # a's claim leaves b in flight (a due time), but its write comes late:
    assert late.claim("a", str(first.token), "o.a", 5, "{}", two, "t").token > 0
    assert late.held and late.held[0][1] >= 0
    assert prompt.claim("b", str(second.token), "o.b", 5, "{}", two, "t").token > 0
    assert client.zscore(index, name) is None  # b's claim left nothing in flight
    late.land()
    assert client.zscore(index, name) is None, "a late due time put an empty name back"
    prompt.release("o.a", two, config, "t")
    prompt.release("o.b", two, config, "t")
    # c's claim empties the name, but its removal lands after d came in:
    third = prompt.enqueue("c", two, "{}", 0, config, "t")
    assert late.claim("c", str(third.token), "o.c", 5, "{}", two, "t").token > 0
    assert late.held[-1][1] < 0
    fourth = prompt.enqueue("d", two, "{}", 0, config, "t")
    assert fourth.token and client.zscore(index, name) is not None
    late.land()
    assert client.zscore(index, name) is not None, "a late removal hid d's reservation"
    assert prompt.claim("d", str(fourth.token), "o.d", 5, "{}", two, "t").token > 0
    assert client.zscore(index, name) is None
    # e waits behind c and d; a removal's process dies before its check:
    waiting = prompt.enqueue("e", two, "{}", 0, config, "t")
    assert not waiting.token and client.zscore(index, name) is not None
    client.zrem(index, name)
    (released, promotions) = prompt.release("o.c", two, config, "t")
    assert released and [p.task_id for p in promotions] == ["e"]
    assert client.zscore(index, name) is not None, "e in flight and out of the index"


def test_a_revoked_task_takes_nothing_on_the_cluster(client: Any) -> None:
    """On a cluster the revoke record is in another slot than the name's park,
    so the claim and the arrival read it before their script: a revoked
    task's claim leaves its reservation, and its arrival stores nothing."""
    from celery_redislock.core.capacity import Capacity
    from celery_redislock.core.park import ParkConfig, Parking, Verdict

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    parking, one, config = Parking(client, prefix, "park:r"), Capacity.semaphore(1), ParkConfig()
    reserved = parking.enqueue("a", one, "{}", 0, config, "t")
    parking.record_revoke("a")
    claim = parking.claim("a", str(reserved.token), "o.a", 5, "{}", one, "t")
    assert claim.verdict is Verdict.REVOKED
    assert [e["task_id"] for e in parking.status(count=5).promoted] == ["a"]
    parking.record_revoke("b")
    assert parking.arrive("b", one, "{}", 0, config, "o.b", 5, "{}", "t").verdict is Verdict.REVOKED
    assert parking.where("b") == ("", "")


def test_keep_latest_and_debounce_on_the_cluster(
    cluster: LocalCluster,
    redis_url: str,
    celery_worker_factory: Any,  # noqa: F811
) -> None:
    """The coalescing modes with the lock Redis on a cluster: the replaced call,
    the debounce hold and the promotion live in the key's slot."""
    from celery_redislock import SUPERSEDED
    from tests.celery_apps.basic import create_app

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    config = {"redis": redis_url, "lock_redis": cluster.url, "prefix": prefix, "park_sweep": "0.5"}
    app = create_app(config)
    celery_worker_factory(config, pool="prefork", concurrency=2)
    key = uuid.uuid4().hex[:8]
    first = app.tasks["basic.keep_latest"].delay(key, 0, 60, True)
    wait_for(lambda: app.recorder.events("keep_latest", key), 60, message="the first run")
    later = [app.tasks["basic.keep_latest"].delay(key, n) for n in range(1, 6)]
    app.recorder.client.set(f"{prefix}:gate:{key}", 1, ex=600)
    first.get(timeout=60)
    later[-1].get(timeout=60)
    starts = [e for e in app.recorder.events("keep_latest", key) if e["what"] == "start"]
    assert [e["value"] for e in starts] == [0, 5]
    assert all(r.state == SUPERSEDED for r in later[:-1])
    debounced = [app.tasks["basic.debounced"].delay(key, n) for n in range(4)]
    debounced[-1].get(timeout=60)
    runs = [e for e in app.recorder.events("debounced", key) if e["what"] == "start"]
    assert [e["value"] for e in runs] == [3]


@pytest.mark.parametrize("scenario", ["keys take turns", "held by a listed rate"])
def test_several_limits_scenarios_on_a_cluster_with_a_real_worker(
    cluster: LocalCluster,
    client: Any,
    redis_url: str,
    celery_worker_factory: Any,  # noqa: F811
    scenario: str,
) -> None:
    """Two scenarios of tests/celery/test_listed_limits.py with the locks on
    the cluster, each name in a slot of its own: keys waiting for a shared
    limit take turns (the making way: a release that holds, a note in the
    limit's slot), and a run held by a listed limit's rate (``park_try.lua``)
    starts when the rate admits it."""
    from tests.celery.test_listed_limits import Scene, held_by_a_listed_rate, keys_take_turns
    from tests.celery_apps.listed import REGION, SHARED

    turns = scenario == "keys take turns"
    task = "charge_park" if turns else "charge_rated"
    scene = Scene(celery_worker_factory, redis_url, client, task, shared=1, lock_redis=cluster.url)
    names = [SHARED, "acct:j", "acct:k"] if turns else [REGION, "acct:a", "acct:b"]
    slots = {client.keyslot(f"{scene.prefix}:{{{n}}}:holders") for n in names}
    assert len(slots) == len(names)
    if turns:
        keys_take_turns(scene)
    else:
        held_by_a_listed_rate(scene)


def test_several_limits_under_park_on_a_cluster_with_a_real_worker(
    cluster: LocalCluster,
    client: Any,
    redis_url: str,
    celery_worker_factory: Any,  # noqa: F811
) -> None:
    """A per-account key and a shared listed limit in other slots of the
    cluster: the run the full shared limit refuses waits in its account's
    park holding nothing, its key noted in the limit's blocked set (the
    limit's slot), and the release of the shared slot wakes it (the fallback
    retry is 120 s here, so only the wake-up starts it in time)."""
    from celery_redislock import FairSemaphore
    from tests.celery.test_listed_limits import most_at_once
    from tests.celery_apps.listed import SHARED, create_listed_app

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    config = {
        "redis": redis_url,
        "lock_redis": cluster.url,
        "prefix": prefix,
        "park_sweep": "0.5",
        "listed_retry": "120",
    }
    app = create_listed_app(config)
    rec = app.recorder  # type: ignore[attr-defined]
    rec.client.set(f"{prefix}:shared-limit", 1)
    slots = {client.keyslot(f"{prefix}:{{{n}}}:holders") for n in (SHARED, "acct:a", "acct:b")}
    assert len(slots) == 3
    task = app.tasks["listed.charge_park"]
    celery_worker_factory(config, module="tests.celery_apps.listed", pool="prefork", concurrency=3)
    first = task.delay("a", 0, gate=True)
    wait_for(lambda: rec.events("charge_park", "all"), 60, message="the first run")
    second = task.delay("b", 0, duration=0.1)
    blocked = f"{prefix}:{{{SHARED}}}:blocked"
    wait_for(lambda: client.zrange(blocked, 0, -1) == [b"acct:b"], 60, message="b noted")
    assert second.state == "PARKED" and second.info["waits_for"] == SHARED
    assert FairSemaphore(client, "acct:b", 2, prefix=prefix).holders() == []
    rec.client.set(f"{prefix}:gate:a:0", 1)
    assert first.get(timeout=60) == 0
    assert second.get(timeout=60) == 0
    history = rec.events("charge_park", "all")
    assert [e["account"] for e in history if e["what"] == "start"] == ["a", "b"]
    assert most_at_once(history) == 1
    assert client.zrange(blocked, 0, -1) == []
