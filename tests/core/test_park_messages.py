"""A parked task's message is stored once, in the name's ``msgs`` hash, and
leaves with the task: the entries that promotion reads and rewrites never
carry it, every way out of the park (a run, a drop, an expiry, a replacing
call) deletes it, and an entry written with its message inline (before
``msgs`` existed) is still published with it."""

from __future__ import annotations

import json
from typing import Any

from celery_redislock.core.capacity import Capacity
from celery_redislock.core.keys import ParkKeys
from celery_redislock.core.park import ParkConfig, Parking, PromotionKind, Verdict
from tests.waiting import wait_for

LIMIT = 1
CAPACITY = Capacity.semaphore(LIMIT)


def envelope(n: int) -> str:
    return json.dumps({"task": "t", "body": "x" * 2000, "n": n})


def held(client: Any, prefix: str, name: str) -> tuple[Parking, ParkKeys]:
    """The park of ``name``, which a run of task "run" holds (owner "owner")."""
    parking = Parking(client, prefix, name)
    admission = parking.arrive("run", CAPACITY, envelope(0), 0, ParkConfig(), "owner", 5, "{}", "t")
    assert admission.verdict is Verdict.HELD
    return parking, ParkKeys(prefix, name)


def redis_ms(client: Any) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_messages_are_stored_once_and_leave_with_their_task(redis_client: Any, prefix: str) -> None:
    parking, keys = Parking(redis_client, prefix, "m"), ParkKeys(prefix, "m")
    config = ParkConfig()
    first = parking.enqueue("a", CAPACITY, envelope(0), 0, config, "t")
    assert first.verdict is Verdict.RESERVED
    for n, task_id in enumerate("bcd", start=1):
        assert (
            parking.enqueue(task_id, CAPACITY, envelope(n), 0, config, "t").verdict
            is Verdict.PARKED
        )
    # One message per id in the park or in flight, none inside the entries.
    assert redis_client.hlen(keys.messages) == 4
    for raw in [*redis_client.hvals(keys.parked), *redis_client.hvals(keys.inflight)]:
        assert len(raw) < 200 and raw.endswith(b"|"), raw
    # A drop hands the message back and forgets it.
    dropped = parking.drop("c")
    assert (dropped.where, json.loads(dropped.envelope)["n"]) == ("parked", 2)
    assert not redis_client.hexists(keys.messages, "c")
    # The run claims its reservation: its message goes; its release promotes
    # the next one with that one's message.
    held = parking.claim("a", str(first.token), "owner-a", 5, "{}", CAPACITY, "t")
    assert held.verdict is Verdict.HELD and not redis_client.hexists(keys.messages, "a")
    _, promoted = parking.release("owner-a", CAPACITY, config, "t")
    assert [(p.task_id, json.loads(p.envelope)["n"]) for p in promoted] == [("b", 1)]
    assert redis_client.hexists(keys.messages, "b")  # in flight: kept for a re-publish
    assert parking.drop("b", str(promoted[0].token)).where == "inflight"
    assert parking.drop("d").where == "parked"
    assert not redis_client.exists(keys.messages)


def test_expired_and_replaced_tasks_take_their_messages_along(
    redis_client: Any, prefix: str
) -> None:
    parking, keys = held(redis_client, prefix, "e")
    latest = ParkConfig(keep_latest=True)
    parking.enqueue("old", CAPACITY, envelope(1), 0, latest, "t")
    replacing = parking.enqueue("new", CAPACITY, envelope(2), 0.05, latest, "t")
    expires_at = redis_ms(redis_client) + 50  # no earlier than its expiry (Redis time)
    assert replacing.replaced == ("old",)
    assert redis_client.hkeys(keys.messages) == [b"new"]
    wait_for(lambda: redis_ms(redis_client) > expires_at, 10, message="its expiry passed")
    _, promoted = parking.release("owner", CAPACITY, ParkConfig(), "t")
    assert [(p.kind.value, p.task_id, json.loads(p.envelope)["n"]) for p in promoted] == [
        ("x", "new", 2)
    ]
    assert not redis_client.exists(keys.messages)


def test_an_entry_carrying_its_message_inline_is_still_published_with_it(
    redis_client: Any, prefix: str
) -> None:
    parking, keys = held(redis_client, prefix, "l")
    assert (
        parking.enqueue("old", CAPACITY, envelope(1), 0, ParkConfig(), "t").verdict
        is Verdict.PARKED
    )
    # The layout before the messages hash: the message is the entry's last field.
    raw = redis_client.hget(keys.parked, "old")
    redis_client.hset(keys.parked, "old", raw + envelope(1).encode())
    redis_client.hdel(keys.messages, "old")
    _, promoted = parking.release("owner", CAPACITY, ParkConfig(), "t")
    assert [(p.task_id, json.loads(p.envelope)["n"]) for p in promoted] == [("old", 1)]
    # Rewritten without it: the message moved to the messages hash.
    assert redis_client.hget(keys.messages, "old") == envelope(1).encode()
    assert redis_client.hget(keys.inflight, "old").endswith(b"|")


def test_a_keep_latest_call_replaces_even_at_the_total_bound(
    redis_client: Any, prefix: str
) -> None:
    """Neither park bound refuses a keep_latest call: at the bound over all
    names, the newer call still takes the older one's place (which ends
    replaced, reported), instead of both being lost."""
    parking, keys = held(redis_client, prefix, "a")
    other, _ = held(redis_client, prefix, "b")
    unbounded = ParkConfig(keep_latest=True)
    assert (
        parking.enqueue("old", CAPACITY, envelope(1), 0, unbounded, "t").verdict is Verdict.PARKED
    )
    assert other.enqueue("y", CAPACITY, envelope(2), 0, unbounded, "t").verdict is Verdict.PARKED
    # Two parked over all names; with "old" taken out, still one at a bound of one.
    bounded = ParkConfig(keep_latest=True, max_total=1)
    newer = parking.enqueue("new", CAPACITY, envelope(3), 0, bounded, "t")
    assert (newer.verdict, newer.replaced) == (Verdict.PARKED, ("old",))
    assert redis_client.hkeys(keys.messages) == [b"new"]
    # A plain call at the bound is still refused, whole.
    refused = other.enqueue("z", CAPACITY, envelope(4), 0, ParkConfig(max_total=1), "t")
    assert refused.verdict is Verdict.BOUNDED_TOTAL


def test_a_name_left_with_nothing_parked_keeps_no_message(redis_client: Any, prefix: str) -> None:
    """A message left over for a task the park no longer holds (a worker of an
    earlier version claimed it) goes when the name's park empties."""
    parking, keys = held(redis_client, prefix, "n")
    redis_client.hset(keys.messages, "gone", envelope(9))
    assert (
        parking.enqueue("p", CAPACITY, envelope(1), 0, ParkConfig(), "t").verdict is Verdict.PARKED
    )
    assert parking.drop("p").where == "parked"
    assert not redis_client.exists(keys.messages)


def test_only_publishes_that_no_copy_claimed_count_toward_max_publishes(
    redis_client: Any, prefix: str
) -> None:
    """A claim that sends its task back (here a lowered limit: another holder
    fills it) shows a worker consumes the task: promoted again, it is a
    first publish ("p"), and sent back more often than ``max_publishes`` it
    is not given up as unclaimed.  A reservation that lapses unclaimed is
    published again as "r" (the caller logs it), and given up after
    ``max_publishes``."""
    two = Capacity.semaphore(2)
    parking = Parking(redis_client, prefix, "sent-back")
    config = ParkConfig(max_publishes=2, deadline=0.05)
    arrived = parking.arrive("h", two, envelope(0), 0, config, "owner-h", 5, "{}", "t")
    assert arrived.verdict is Verdict.HELD
    reserved = parking.enqueue("a", two, envelope(1), 0, config, "t")
    assert reserved.verdict is Verdict.RESERVED
    token = reserved.token
    for _ in range(3):
        back = parking.claim("a", str(token), "owner-a", 5, "{}", Capacity.semaphore(1), "t")
        assert back.verdict is Verdict.PARKED
        [promoted] = parking.promote(two, config, "t")
        assert (promoted.kind, promoted.task_id) == (PromotionKind.PUBLISH, "a")
        token = promoted.token
    kinds = []
    for _ in range(2):  # no claim: each reservation lapses at its deadline
        wait_for(lambda: parking.status().overdue == 1, 10, message="the reservation lapsed")
        kinds += [p.kind for p in parking.promote(two, config, "t")]
    assert kinds == [PromotionKind.REPUBLISH, PromotionKind.UNCLAIMED]


def test_where_states_are_not_seen_no_park_script_takes_a_state_guard(
    redis_client: Any, prefix: str
) -> None:
    """``seen=False`` (parking/states.py ``STATES_SEEN``: no result backend,
    no events): parking at enqueue and at arrival, and promoting by a
    release, by the sweeper and by a listed limit's wake-up, take no state
    guard; with ``seen`` (the default) each takes the guard of the task it
    parks or promotes first."""
    for seen in (False, True):
        _promotions_by_each_path(redis_client, prefix, seen)


def _promotions_by_each_path(redis_client: Any, prefix: str, seen: bool) -> None:
    one, config = Capacity.semaphore(1), ParkConfig(deadline=30)
    parking = Parking(redis_client, prefix, f"seen-{seen}")
    base = f"{prefix}:{{seen-{seen}}}:state:"

    def guards() -> list[str]:
        return sorted(
            k.decode().removeprefix(base) for k in redis_client.scan_iter(match=base + "*")
        )

    def lose(owner: str) -> None:  # the holder's lease is lost: its slot is free
        assert redis_client.zrem(parking.keys.holders, owner) == 1

    first = parking.enqueue("t0", one, "{}", 0, config, "t", seen=seen)
    assert parking.claim("t0", str(first.token), "o0", 30, "{}", one, "t").token > 0
    parked = [parking.enqueue(f"t{n}", one, "{}", 0, config, "t", seen=seen) for n in (1, 2, 3)]
    arrived = parking.arrive("t4", one, "{}", 0, config, "o4", 30, "{}", "t", seen=seen)
    assert {a.verdict for a in (*parked, arrived)} == {Verdict.PARKED}
    assert [bool(a.guard) for a in (*parked, arrived)] == [seen] * 4
    assert guards() == (["t1", "t2", "t3", "t4"] if seen else [])
    for task_id in guards():
        redis_client.delete(base + task_id)  # as their PARKED writes give them back
    # a release promotes t1
    held, promotions = parking.release("o0", one, config, "t", seen=seen)
    assert held and [(p.task_id, bool(p.guard)) for p in promotions] == [("t1", seen)]
    assert parking.claim("t1", str(promotions[0].token), "o1", 30, "{}", one, "t").token > 0
    # the sweeper promotes t2 into the slot a lost lease freed
    lose("o1")
    promotions = parking.promote(None, config, seen=seen)
    assert [(p.task_id, bool(p.guard)) for p in promotions] == [("t2", seen)]
    assert parking.claim("t2", str(promotions[0].token), "o2", 30, "{}", one, "t").token > 0
    # a listed limit's wake-up promotes t3
    lose("o2")
    assert parking.hold_for("L", 5)
    promotions, _ = parking.unhold(config, "L", seen=seen)
    assert [(p.task_id, bool(p.guard)) for p in promotions] == [("t3", seen)]
    assert guards() == (["t1", "t2", "t3"] if seen else [])
