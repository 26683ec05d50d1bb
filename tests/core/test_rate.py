"""RateLimiter (GCRA) against a real Redis: the bound over any window, bursts,
costs, pauses, refusals that take nothing, and precise errors for bad input."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from celery_redislock import Overrides, RateLimiter
from celery_redislock.core.capacity import Capacity
from celery_redislock.core.keys import park_index
from celery_redislock.core.park import ParkConfig, Parking, PromotionKind, Verdict
from celery_redislock.core.rate import NO_RATE, Rate, RateTerms, parse_rate
from tests.waiting import wait_for

SLOTS = Capacity.semaphore(1000)  # a semaphore the rate, not the cap, holds back


def redis_now(client: Any) -> float:
    seconds, micros = client.time()
    return float(seconds) + micros / 1_000_000


@pytest.fixture
def name() -> str:
    return f"rate-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize(
    ("value", "per_second"),
    [
        ("10/s", 10),
        ("100/m", 100 / 60),
        ("1000/h", 1000 / 3600),
        ("5/d", 5 / 86400),
        (20, 20),
        (0.5, 0.5),
        ("20", 20),
        (" 3 / s ", 3),
        (Rate(2, 1), 2),
    ],
)
def test_rates_in_celery_notation_and_numbers(value: object, per_second: float) -> None:
    assert parse_rate(value).per_second == pytest.approx(per_second)


@pytest.mark.parametrize(
    "value",
    ["1000000/h", "1e6/h", "1e6/s", "1e-5/s", "500/m", "0.5", 20, Rate(1, 3), Rate(7, 86400)],
)
def test_a_rate_written_out_reads_back_as_the_same_rate(value: object) -> None:
    """What the CLI, ``limit show``, ``status --top`` and the web view print of
    a rate (an override stored as text, too) is read back by ``parse_rate``
    to the same rate: ``1000000/h`` once came out as ``1e+06/h``, which it
    refused, so a stored override broke every command that showed it."""
    rate = parse_rate(value)
    assert parse_rate(str(rate)).per_second == pytest.approx(rate.per_second, rel=1e-5)
    assert "e+" not in str(rate)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("fast", ValueError, "must look like"),
        (0, ValueError, "positive"),
        ("0/s", ValueError, "positive"),
        (-5, ValueError, "positive"),
        (float("inf"), ValueError, "finite"),
        ("10/w", ValueError, "must look like"),
        ("1e10/s", ValueError, "at most 1000000/s"),  # below Redis's microsecond
        ("1e-9/d", ValueError, "at least one start per 100000000 s"),
        (1e-300, ValueError, "at least one start per"),
        (True, TypeError, "rate must be"),
        (None, TypeError, "rate must be"),
        ([10], TypeError, "rate must be"),
    ],
)
def test_bad_rates_are_one_precise_error(value: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        parse_rate(value)


def test_bad_burst_and_cost_are_refused_at_the_call(redis_client: Any, prefix: str) -> None:
    with pytest.raises(ValueError, match="burst must be an int >= 1"):
        RateLimiter(redis_client, "x", rate="1/s", burst=0, prefix=prefix)
    with pytest.raises(TypeError, match="burst"):
        RateLimiter(redis_client, "x", rate="1/s", burst=1.5, prefix=prefix)  # type: ignore[arg-type]
    limiter = RateLimiter(redis_client, "x", rate="1/s", burst=3, prefix=prefix)
    with pytest.raises(ValueError, match="cost 4 is above the burst 3"):
        limiter.try_acquire(4)
    with pytest.raises(ValueError, match="cost must be an int >= 1"):
        limiter.try_acquire(0)
    with pytest.raises(TypeError, match="cost"):
        limiter.acquire(True)
    with pytest.raises(ValueError, match="cost 9 is above"):
        limiter.acquire(9, blocking_timeout=1)
    assert redis_client.exists(limiter.keys.rate) == 0  # nothing was taken


def test_a_burst_starts_back_to_back_then_the_rate_spaces_them(
    redis_client: Any, prefix: str, name: str
) -> None:
    limiter = RateLimiter(redis_client, name, rate="10/s", burst=3, prefix=prefix)
    assert [bool(limiter.try_acquire()) for _ in range(3)] == [True] * 3
    refused = limiter.try_acquire()
    assert not refused
    assert 0 < refused.retry_after <= 0.1 + 1e-6
    # A refusal takes nothing: after the time it named, the same call is admitted.
    wait_for(lambda: bool(limiter.try_acquire()), 5, message="admitted after retry_after")


def test_a_cost_takes_that_many_units(redis_client: Any, prefix: str, name: str) -> None:
    limiter = RateLimiter(redis_client, name, rate="1/m", burst=5, prefix=prefix)
    assert limiter.try_acquire(3)
    assert not limiter.try_acquire(3)  # two units left
    assert limiter.peek(2) and limiter.peek(2)  # peeking takes nothing
    assert limiter.try_acquire(2)
    refused = limiter.try_acquire(1)
    assert not refused and 59 < refused.retry_after <= 60


def test_no_window_ever_admits_more_than_the_burst_plus_the_rate(
    redis_client: Any, prefix: str, name: str
) -> None:
    """Four clients hammer one name for about a second: the units admitted
    between two Redis times never exceed burst + elapsed * rate."""
    rate, burst = 50.0, 4
    admitted: list[int] = []
    start = redis_now(redis_client)

    def client() -> None:
        limiter = RateLimiter(redis_client, name, rate=rate, burst=burst, prefix=prefix)
        count = 0
        while redis_now(redis_client) - start < 1.0:
            count += bool(limiter.try_acquire())
        admitted.append(count)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    elapsed = redis_now(redis_client) - start
    assert len(admitted) == 4
    assert sum(admitted) <= burst + elapsed * rate
    assert sum(admitted) >= burst + 1  # the rate did admit, not only the burst


def test_blocking_acquire_waits_for_its_turn_or_gives_up(
    redis_client: Any, prefix: str, name: str
) -> None:
    slow = RateLimiter(redis_client, name, rate="1/m", prefix=prefix)
    assert slow.acquire()
    assert slow.acquire(blocking_timeout=0.2) is False  # 60 s away: gives up at once
    fast = RateLimiter(redis_client, f"{name}-fast", rate="20/s", prefix=prefix)
    assert all(fast.acquire(blocking_timeout=5) for _ in range(5))


def test_a_pause_holds_every_start_and_only_lengthens(
    redis_client: Any, prefix: str, name: str
) -> None:
    limiter = RateLimiter(redis_client, name, rate="100/s", burst=10, prefix=prefix)
    assert limiter.pause(30) == pytest.approx(30, abs=0.01)
    assert limiter.pause(1) > 29  # a shorter pause leaves the longer one
    refused = RateLimiter(redis_client, name, rate="100/s", burst=10, prefix=prefix).try_acquire()
    assert not refused and refused.retry_after > 29
    assert limiter.paused_for() > 29
    limiter.resume()
    assert limiter.paused_for() == 0
    assert limiter.try_acquire()
    with pytest.raises(ValueError, match="pause must be a positive"):
        limiter.pause(0)


def test_an_idle_name_leaves_no_key(redis_client: Any, prefix: str, name: str) -> None:
    limiter = RateLimiter(redis_client, name, rate="20/s", burst=2, prefix=prefix)
    assert limiter.try_acquire() and limiter.try_acquire()
    assert f"{{{name}}}" in limiter.keys.rate  # one cluster slot per name
    # The key outlives the arrival time by the 5 ms a parked backlog's schedule may lag.
    assert 0 < redis_client.pttl(limiter.keys.rate) <= 106
    wait_for(lambda: redis_client.exists(limiter.keys.rate) == 0, 5, message="key expired")


def test_a_rate_keeps_one_small_value_whatever_it_admitted(
    own_redis: Any, prefix: str, name: str
) -> None:
    """The moving-window limiter of ``limits`` keeps one entry per admitted
    unit and stalled Redis (limits #268).  A rate here is one string (the
    time the next unit is due): its size and the work of one decision do not
    grow with the burst or with what was admitted."""
    import redis

    client = redis.Redis.from_url(own_redis.url)
    limiter = RateLimiter(client, name, rate="100000/s", burst=10_000, prefix=prefix)
    assert limiter.try_acquire()
    first_size = client.memory_usage(limiter.keys.rate)
    client.config_resetstat()
    admitted = sum(bool(limiter.try_acquire()) for _ in range(2_000))
    assert admitted == 2_000
    assert client.type(limiter.keys.rate) == b"string"
    size = client.memory_usage(limiter.keys.rate)
    # a number's string: its encoding, and so a few bytes, varies with its
    # digits (96 or 112 bytes), not with what was admitted (a window of
    # 2,000 entries would be kilobytes)
    assert size <= max(first_size, 96) + 32, (first_size, size)
    assert client.strlen(limiter.keys.rate) <= 24
    stats = client.info("commandstats")
    calls = {k: v["calls"] for k, v in stats.items() if k.startswith("cmdstat_")}
    # one script call per decision, each running the same few commands once
    # (besides the MEMORY, TYPE and STRLEN asked here; Redis 6 names MEMORY
    # without "|usage"): nothing that grows with the burst
    asked_here = ("cmdstat_type", "cmdstat_memory", "cmdstat_config", "cmdstat_strlen")
    per_decision = {k: v for k, v in calls.items() if not k.startswith(asked_here)}
    assert set(per_decision.values()) == {2_000}, calls
    assert len(per_decision) <= 8, calls


def _promoted_100_ms_apart(
    redis_client: Any, prefix: str, name: str
) -> tuple[Parking, ParkConfig, RateTerms, int, int]:
    """Tasks a and b of a 10/s name, a reserved at once and b promoted at its
    time, both in flight; returns the park, its config and rate, and the two
    promotion tokens."""
    park = Parking(redis_client, prefix, name)
    config = ParkConfig(deadline=30)
    terms = RateTerms(parse_rate("10/s"))
    first = park.enqueue("a", SLOTS, "{}", 0, config, "t", terms)
    assert first.verdict is Verdict.RESERVED
    assert park.enqueue("b", SLOTS, "{}", 0, config, "t", terms).verdict is Verdict.PARKED
    wait_for(
        lambda: [p.task_id for p in park.promote(None, config)] == ["b"],
        5,
        message="b promoted at its time",
    )
    token_b = int(redis_client.hget(f"{prefix}:{{{name}}}:inflight", "b").split(b"|")[0])
    return park, config, terms, first.token, token_b


def test_starts_keep_the_rate_not_only_admissions(
    redis_client: Any, prefix: str, name: str
) -> None:
    """Two promotions admitted 100 ms apart whose messages reach workers at the
    same moment: the second claim waits out the rest of the interval before
    its body starts (park_claim.lua, start_delay()), so starts, not only
    admissions, keep 10/s."""
    park, _, _, token_a, token_b = _promoted_100_ms_apart(redis_client, prefix, name)
    assert sorted(e["task_id"] for e in park.status(count=10).promoted) == ["a", "b"]
    a = park.claim("a", str(token_a), "o.a", 5, "{}", SLOTS, "t")
    b = park.claim("b", str(token_b), "o.b", 5, "{}", SLOTS, "t")
    assert a.verdict is b.verdict is Verdict.HELD
    assert a.wait == 0 and 0.05 < b.wait <= 0.1


def test_a_revoked_task_takes_nothing_at_its_claim_or_arrival(
    redis_client: Any, prefix: str, name: str
) -> None:
    """The revoke record is read by the claim and arrival scripts before they
    take anything: a revoked task's claim leaves its reservation (the caller
    drops it) and books no start, so the next task's start does not wait
    for it; a revoked message without a token is neither held nor parked."""
    park, config, terms, token_a, token_b = _promoted_100_ms_apart(redis_client, prefix, name)
    park.record_revoke("a")
    a = park.claim("a", str(token_a), "o.a", 5, "{}", SLOTS, "t")
    assert a.verdict is Verdict.REVOKED and a.token == 0
    assert sorted(e["task_id"] for e in park.status(count=10).promoted) == ["a", "b"]
    assert not redis_client.exists(f"{prefix}:{{{name}}}:started")
    b = park.claim("b", str(token_b), "o.b", 5, "{}", SLOTS, "t")
    assert b.verdict is Verdict.HELD and b.wait == 0
    park.record_revoke("c")
    c = park.arrive("c", SLOTS, "{}", 0, config, "o.c", 5, "{}", "t", terms)
    assert c.verdict is Verdict.REVOKED
    assert park.status().parked == 0 and park.where("c") == ("", "")


def test_a_start_that_would_wait_long_goes_back_to_the_park(
    redis_client: Any, prefix: str, name: str
) -> None:
    """A rate lowered while promotions are on their way: the run that would
    wait past 0.25 s before starting is parked again instead of holding a
    worker process."""
    park = Parking(redis_client, prefix, name)
    config = ParkConfig(deadline=30)
    terms = RateTerms(parse_rate("10/s"), burst=2)
    tokens = [park.enqueue(t, SLOTS, "{}", 0, config, "t", terms).token for t in ("a", "b")]
    assert all(tokens)
    Overrides(redis_client, name, prefix).set(rate="1/h")
    assert park.claim("a", str(tokens[0]), "o.a", 5, "{}", SLOTS, "t").verdict is Verdict.HELD
    back = park.claim("b", str(tokens[1]), "o.b", 5, "{}", SLOTS, "t")
    assert back.verdict is Verdict.PARKED and park.status().parked == 1


def test_a_hold_for_one_listed_limit_is_left_alone_by_another(
    redis_client: Any, prefix: str
) -> None:
    """``park_hold.lua`` for limit L on a name whose parked work is held for
    limit M: nothing changes (not held for L, so the caller does not note
    it), and the parked task, its message and M's hold stay; ``unhold`` for
    L promotes nothing, ``unhold`` for M promotes it."""
    park = Parking(redis_client, prefix, "acct:k")
    envelope = '{"task": "t", "id": "t1"}'
    parked = park.park_at_head(
        "t1", Capacity.semaphore(1), envelope, 0, 0, "t", NO_RATE, hold=30, waits_for="M"
    )
    assert parked.count == 1
    assert not park.hold_for("L", 5)
    status = park.status(count=1)
    assert (status.parked, status.waits_for) == (1, "M")
    assert status.entries[0]["task_id"] == "t1"
    config = ParkConfig(deadline=5)
    assert park.unhold(config, "L") == ([], False)
    (promotion,), _ = park.unhold(config, "M")
    assert promotion.task_id == "t1" and promotion.envelope == envelope


def test_a_release_that_makes_way_holds_the_parked_work_instead_of_promoting_it(
    redis_client: Any, prefix: str
) -> None:
    """``park_release.lua`` with a hold for listed limit L (a run that gave
    its slot of L to a name waiting for it): the slot is given back and the
    parked work held for L, nothing promoted, until ``unhold`` for L; with a
    hold for another limit M on, that hold stays and the reply says the work
    is not held for L (the caller takes the name's note back)."""
    one = Capacity.semaphore(1)
    config = ParkConfig(deadline=5)
    park = Parking(redis_client, prefix, f"acct:{uuid.uuid4().hex[:6]}")
    assert park.try_hold(one, "o.1", 5, "{}", NO_RATE).verdict is Verdict.HELD
    for task_id in ("t1", "t2"):
        assert park.enqueue(task_id, one, "{}", 0, config, "t").count  # full: parked
    held, promotions, held_for = park.release_making_way("o.1", one, config, "t", "L", 30)
    assert (held, promotions, held_for) == (True, [], True)
    assert (park.status().parked, park.status().waits_for) == (2, "L")
    (promoted,), _ = park.unhold(config, "L")
    assert promoted.task_id == "t1"

    other = Parking(redis_client, prefix, f"acct:{uuid.uuid4().hex[:6]}")
    assert other.try_hold(one, "o.2", 5, "{}", NO_RATE).verdict is Verdict.HELD
    assert other.park_at_head("t3", one, "{}", 0, 0, "t", NO_RATE, hold=30, waits_for="M").count
    held, promotions, held_for = other.release_making_way("o.2", one, config, "t", "L", 30)
    assert (held, promotions, held_for) == (True, [], False)
    assert other.status().waits_for == "M"


def test_the_sweepers_due_time_is_the_end_of_the_hold_a_call_just_wrote(
    redis_client: Any, prefix: str
) -> None:
    """The time the sweeper looks at a name next (its score in the park
    index) after a call that holds its parked work for listed limit L: a
    release that makes way, on a name whose work a debounce holds for 60 s,
    leaves the later of the two (60 s, not L's 5 s); a wake-up that promotes
    one task and holds the rest for L again (30 s) leaves the end of that
    hold, not now (a slot of the name is free, and a sweep then would
    promote into the full limit).  Both scripts keep the holds they read
    (``includes/parked_hold.lua``) and must not leave them stale."""
    one = Capacity.semaphore(1)
    index = park_index(prefix)

    def due_in(park: Parking) -> float:
        score = redis_client.zscore(index, park.name)
        assert score is not None, f"{park.name} not in the park index"
        return float(score) / 1000 - redis_now(redis_client)

    debounced = Parking(redis_client, prefix, f"acct:{uuid.uuid4().hex[:6]}")
    config = ParkConfig(deadline=5, keep_latest=True, debounce=60)
    assert debounced.try_hold(one, "o.1", 5, "{}", NO_RATE).verdict is Verdict.HELD
    assert debounced.enqueue("d1", one, "{}", 0, config, "t").verdict is Verdict.PARKED
    held, promotions, held_for = debounced.release_making_way("o.1", one, config, "t", "L", 5)
    assert (held, promotions, held_for) == (True, [], True)
    assert 50 < due_in(debounced) <= 60

    woken = Parking(redis_client, prefix, f"acct:{uuid.uuid4().hex[:6]}")
    three = Capacity.semaphore(3)
    for n in range(3):
        woken.park_at_head(f"w{n}", three, "{}", 0, 0, "t", NO_RATE, hold=30, waits_for="L")
    # The promotion's reservation lasts 120 s: the earliest time is the hold's.
    (promotion,), held_again = woken.unhold(ParkConfig(deadline=120), "L", 30)
    assert held_again and promotion.task_id == "w2"
    assert 20 < due_in(woken) <= 30


def test_a_head_sent_back_by_another_limit_replaces_the_hold_for_the_first(
    redis_client: Any, prefix: str
) -> None:
    """A name held for listed limit L1 (a wake-up held its rest for 30 s);
    its head is then sent back by L2's rate for 0.2 s: the hold is now
    L2's and ends with that wait, not with L1's 30 s."""
    park = Parking(redis_client, prefix, "acct:r")
    one = Capacity.semaphore(1)
    park.park_at_head("t1", one, "{}", 0, 0, "t", NO_RATE, hold=30, waits_for="L1")
    assert park.status().waits_for == "L1"
    park.park_at_head("t0", one, "{}", 0, 0, "t", NO_RATE, hold=0.2, waits_for="L2")
    assert park.status().waits_for == "L2"
    wait_for(lambda: park.status().waits_for is None, 10, message="L2's short hold to end")
    (promotion,) = park.promote(one, ParkConfig(deadline=5))
    assert promotion.task_id == "t0"


def test_a_head_sent_back_by_the_held_limits_rate_goes_alone_when_the_rate_admits_it(
    redis_client: Any, prefix: str
) -> None:
    """A name (3 slots) whose two parked tasks are held for listed limit M for
    30 s (a wake-up held them); its head is then sent back by M's rate for
    2 s: the longer hold stays for the rest, but the head alone is promoted
    when its 2 s end, and the rest stays held for M."""
    park = Parking(redis_client, prefix, "acct:h")
    three = Capacity.semaphore(3)
    config = ParkConfig(deadline=5)
    for n in range(2):
        park.park_at_head(f"t{n}", three, "{}", 0, 0, "t", NO_RATE, hold=30, waits_for="M")
    park.park_at_head("t9", three, "{}", 0, 0, "t", NO_RATE, hold=2, waits_for="M")
    assert park.promote(three, config) == []  # the head's 2 s are not over
    (head,) = wait_for(lambda: park.promote(three, config), 15, message="the head to go alone")
    assert head.task_id == "t9"
    status = park.status()
    assert (status.parked, status.in_flight, status.waits_for) == (2, 1, "M")
    assert park.promote(three, config) == []  # the rest: still held for M


@pytest.mark.parametrize("leaves", ["dropped", "expired", "passed", "made way"])
def test_a_heads_own_time_under_a_hold_is_not_taken_by_the_next_task(
    redis_client: Any, prefix: str, leaves: str
) -> None:
    """As above, but the head sent back for M's rate (1 s) leaves the head of
    the park before its time: dropped (revoked), expired, or passed by
    another run of the name put back ahead of it without a hold; or a run of
    the name made way at M (the name waits for its turn at M now).  Past its
    time, nothing is promoted: the rest stays held for M's 30 s (the head's
    time was its own, and went with the turn)."""
    park = Parking(redis_client, prefix, "acct:h")
    three = Capacity.semaphore(3)
    for n in range(2):
        park.park_at_head(f"t{n}", three, "{}", 0, 0, "t", NO_RATE, hold=30, waits_for="M")
    expires = 0.5 if leaves == "expired" else 0
    park.park_at_head("t9", three, "{}", expires, 0, "t", NO_RATE, hold=1, waits_for="M")
    past_its_time = redis_now(redis_client) + 1.0
    if leaves == "dropped":
        assert park.drop("t9").where == "parked"
    elif leaves == "passed":
        park.park_at_head("tB", three, "{}", 0, 0, "t", NO_RATE)
    elif leaves == "made way":
        assert park.hold_for("M", 30)
    wait_for(lambda: redis_now(redis_client) > past_its_time, 10, message="the head's time")
    promoted = park.promote(three, ParkConfig(deadline=5))
    assert [p.task_id for p in promoted if p.kind is not PromotionKind.EXPIRED] == []
    assert park.status().waits_for == "M"


def test_a_wake_up_promotes_one_and_holds_the_rest_for_the_limit_again(
    redis_client: Any, prefix: str
) -> None:
    """A name (3 slots) with four tasks parked and held for listed limit M:
    ``unhold`` for M with a hold promotes one and holds the other three for
    M again (says so), so the sweeper promotes nothing into a limit that
    would send them back; the next wake-up promotes one more; one without a
    hold promotes one and lifts the hold, and the sweeper fills the rest."""
    park = Parking(redis_client, prefix, "acct:w")
    three = Capacity.semaphore(3)
    for n in range(4):
        park.park_at_head(f"t{n}", three, "{}", 0, 0, "t", NO_RATE, hold=30, waits_for="M")
    config = ParkConfig(deadline=5)
    (first,), held_again = park.unhold(config, "M", 30)
    assert held_again and first.task_id == "t3"  # each went back to the head
    status = park.status()
    assert (status.parked, status.in_flight, status.waits_for) == (3, 1, "M")
    assert park.promote(three, config) == []  # the sweeper: held
    (second,), held_again = park.unhold(config, "M", 30)
    assert held_again and second.task_id == "t2"
    (third,), held_again = park.unhold(config, "M")  # no hold: lifted
    assert not held_again and third.task_id == "t1"
    assert park.status().waits_for is None
    assert [p.task_id for p in park.promote(three, config)] == []  # 3 in flight: full
    assert park.status().parked == 1


def test_a_listed_release_gives_the_slot_back_and_wakes_the_oldest_noted_name_in_one_call(
    redis_client: Any, prefix: str
) -> None:
    """``limit_release.lua`` (a run's release of a listed lease): the slot
    is given back first, so the oldest noted name is woken by the same
    call; with nobody noted, the reply is the release's alone."""
    from celery_redislock.core.keys import LeaseKeys
    from celery_redislock.core.scripts import LIMIT_BLOCK
    from celery_redislock.core.semaphore import FairSemaphore
    from celery_redislock.parking.promotion import release_listed

    limit = f"shared-{uuid.uuid4().hex[:8]}"
    keys = LeaseKeys(prefix, limit)
    script_keys = [*keys.lease_keys(), *keys.blocked_keys()]
    holder = FairSemaphore(redis_client, limit, 1, ttl=30, prefix=prefix, index=True)
    assert holder.acquire(blocking=False)
    noted = LIMIT_BLOCK(redis_client, script_keys, ["acct:k", 1, 60_000, 0, 0, 0])
    assert noted == 1  # full: noted
    woken: list[Any] = []
    release_listed(holder, woken)
    assert woken == [b"acct:k", 1, 0, 0]
    assert holder.holders() == [] and redis_client.zrange(keys.blocked, 0, -1) == []
    assert holder.acquire(blocking=False)
    release_listed(holder, woken)
    assert woken == []


def test_a_wake_up_reports_room_for_one_more_only_while_nobody_else_waits(
    redis_client: Any, prefix: str
) -> None:
    """``limit_wake.lua`` on a free listed limit of 3: with two names noted,
    waking the first does not report room for one more (the second is
    next, and a task promoted for it is not counted as a holder yet); the
    second, then alone, does."""
    from celery_redislock.core.keys import LeaseKeys
    from celery_redislock.core.scripts import LIMIT_BLOCK, LIMIT_WAKE

    limit = f"shared-{uuid.uuid4().hex[:8]}"
    keys = LeaseKeys(prefix, limit)
    script_keys = [*keys.lease_keys(), *keys.blocked_keys()]
    for name in ("acct:a", "acct:b"):  # in flight: 3 of 3, so noted
        assert LIMIT_BLOCK(redis_client, script_keys, [name, 3, 60_000, 3, 0, 0]) == 1
    assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, ""]) == [b"acct:a", 3, 0, 0]
    assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, "promoted."]) == [b"acct:b", 3, 0, 1]


def test_a_limit_serves_names_new_to_the_round_before_names_that_had_their_turn(
    redis_client: Any, prefix: str
) -> None:
    """A listed limit's blocked set is served in rounds
    (``includes/place_in_blocked.lua``): a name noted for the first time goes
    before every name noted after a turn (a light account is not served
    behind a round of heavy ones); a name that had its turn in this round
    goes to the back when noted again, whether it was taken out of the set
    by its wake-up or by ``limit_forget.lua``, or noted just after a turn
    (``turn`` -1); a name that made way (``turn``: the time it handed its
    slot on) goes just before the names noted since;
    once every name noted after a turn had its turn since, it is new again."""
    from celery_redislock.core.keys import LeaseKeys
    from celery_redislock.core.scripts import LIMIT_BLOCK, LIMIT_FORGET, LIMIT_WAKE

    limit = f"shared-{uuid.uuid4().hex[:8]}"
    keys = LeaseKeys(prefix, limit)
    script_keys = [*keys.lease_keys(), *keys.blocked_keys()]

    def note(name: str, holds: int = 1, turn: int = 0) -> None:  # 1 of 1 in flight: noted
        assert LIMIT_BLOCK(redis_client, script_keys, [name, 1, 60_000, 1, holds, turn]) == 1

    def wake() -> str:
        woken = LIMIT_WAKE(redis_client, script_keys, ["", 60_000, ""])
        return str(woken[0].decode())

    def order() -> list[str]:
        return [m.decode() for m in redis_client.zrange(keys.blocked, 0, -1)]

    note("heavy:1")
    note("heavy:2")
    assert wake() == "heavy:1"  # noted again, at the back
    note("light")
    assert order() == ["heavy:2", "light", "heavy:1"]
    assert wake() == "heavy:2" and wake() == "light"
    assert order() == ["heavy:1", "heavy:2", "light"]
    note("one-off", holds=0)
    assert order() == ["one-off", "heavy:1", "heavy:2", "light"]
    assert wake() == "one-off"  # taken out of the set: its turn is recorded
    assert LIMIT_FORGET(redis_client, keys.blocked_keys(), ["light", 60_000]) == 1
    note("one-off", holds=0)
    note("light")
    assert order() == ["heavy:1", "heavy:2", "one-off", "light"]
    note("made-way", turn=-1)
    assert order()[-1] == "made-way"
    assert [wake() for _ in range(5)] == ["heavy:1", "heavy:2", "one-off", "light", "made-way"]
    assert LIMIT_FORGET(redis_client, keys.blocked_keys(), ["light", 60_000]) == 1
    for _ in range(3):  # heavy:1, heavy:2 and made-way have their turns after light's
        assert wake() != "light"
    note("light")  # every name noted after a turn had its turn since light's: new again
    assert order() == ["light", "heavy:1", "heavy:2", "made-way"]
    # made way when its slot went to heavy:2 (noted again then): just before it
    note("handed-on", turn=int(redis_client.zscore(keys.blocked, "heavy:2") or 0))
    assert order() == ["light", "heavy:1", "handed-on", "heavy:2", "made-way"]


def test_rounds_hold_for_names_that_leave_the_set_when_woken(
    redis_client: Any, prefix: str
) -> None:
    """The same rounds for a templated limit, whose woken names leave the set
    (holds 0): a name woken and refused again goes behind a name that
    arrives after it but had no turn; once nobody waits, every name is new
    again (the records go at the next note); with only new names waiting,
    the records older than the first one's note go."""
    from celery_redislock.core.keys import LeaseKeys
    from celery_redislock.core.scripts import LIMIT_BLOCK, LIMIT_WAKE

    limit = f"region-{uuid.uuid4().hex[:8]}"
    keys = LeaseKeys(prefix, limit)
    script_keys = [*keys.lease_keys(), *keys.blocked_keys()]

    def note(name: str) -> None:  # 1 of 1 in flight: noted
        assert LIMIT_BLOCK(redis_client, script_keys, [name, 1, 60_000, 1, 0, 0]) == 1

    def wake() -> str:
        return str(LIMIT_WAKE(redis_client, script_keys, ["", 60_000, ""])[0].decode())

    def order() -> list[str]:
        return [m.decode() for m in redis_client.zrange(keys.blocked, 0, -1)]

    note("a")
    note("b")
    assert wake() == "a" and order() == ["b"]
    note("a")  # its head refused again: it had its turn
    note("late")
    assert order() == ["b", "late", "a"]
    assert [wake() for _ in range(3)] == ["b", "late", "a"]
    assert order() == []
    note("a")  # noted while nobody waits: the records go
    note("b")
    assert order() == ["a", "b"] and not redis_client.exists(keys.blocked_turns)
    assert wake() == "a"
    note("c")
    assert wake() == "b" and order() == ["c"]
    note("d")  # only new names wait: turns before c's note (a's) are of an earlier round
    assert redis_client.zrange(keys.blocked_turns, 0, -1) == [b"b"]
    assert order() == ["c", "d"]


def test_a_note_is_taken_back_only_if_it_is_the_one_a_wake_up_made(
    redis_client: Any, prefix: str
) -> None:
    """``limit_forget.lua`` takes back the note a wake-up made when it noted
    a holding name again (``limit_wake.lua``), not a note ``limit_block.lua``
    made since (a run of the name refused by the limit meanwhile): that one
    stays, so the name is still woken."""
    from celery_redislock.core.keys import LeaseKeys
    from celery_redislock.core.scripts import LIMIT_BLOCK, LIMIT_FORGET, LIMIT_WAKE

    limit = f"shared-{uuid.uuid4().hex[:8]}"
    keys = LeaseKeys(prefix, limit)
    script_keys = [*keys.lease_keys(), *keys.blocked_keys()]
    note = ["acct:k", 2, 60_000, 2, 1, 0]  # 2 of 2 in flight: noted, holding
    forget = keys.blocked_keys()
    assert LIMIT_BLOCK(redis_client, script_keys, note) == 1
    assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, ""])[:3] == [b"acct:k", 2, 1]
    assert LIMIT_BLOCK(redis_client, script_keys, note) == 1  # noted since: it keeps its place
    assert LIMIT_FORGET(redis_client, forget, ["acct:k", 60_000]) == 0
    assert redis_client.zrange(keys.blocked, 0, -1) == [b"acct:k"]
    assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, ""])[:3] == [b"acct:k", 2, 1]
    assert LIMIT_FORGET(redis_client, forget, ["acct:k", 60_000]) == 1
    assert redis_client.zrange(keys.blocked, 0, -1) == []


def test_a_task_published_for_a_limit_counts_as_taking_a_slot_until_it_holds_one(
    redis_client: Any, prefix: str
) -> None:
    """``limit_wake.lua`` ARGV[4]: the tasks a caller published for a listed
    limit of 3, by execution tag, count as taking a slot besides its
    holders, except one that holds a slot already (its owner id begins
    with its tag): it is counted once, as a holder.  Counted twice, the
    limit would look full and the name waiting would not be woken."""
    from celery_redislock.core.keys import LeaseKeys
    from celery_redislock.core.owners import execution_prefix, execution_tag, new_owner
    from celery_redislock.core.scripts import ACQUIRE, LIMIT_BLOCK, LIMIT_WAKE

    limit = f"shared-{uuid.uuid4().hex[:8]}"
    keys = LeaseKeys(prefix, limit)
    script_keys = [*keys.lease_keys(), *keys.blocked_keys()]
    started = new_owner(execution_prefix("task-a", 1))
    assert ACQUIRE(redis_client, keys.script_keys(), [started, 3, 30_000, "", 0, 0])
    assert LIMIT_BLOCK(redis_client, script_keys, ["acct:k", 3, 60_000, 2, 0, 0]) == 1  # full
    published = f"{execution_tag('task-a')} {execution_tag('task-b')}"
    assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, published]) == [b"acct:k", 3, 0, 0]
    assert LIMIT_BLOCK(redis_client, script_keys, ["acct:k", 3, 60_000, 2, 0, 0]) == 1  # full
    both = f"{published} {execution_tag('task-c')}"  # 1 holder + 2 in flight: full
    assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, both]) == []


def test_a_limit_wakes_the_oldest_noted_name_while_nothing_queued_is_before_it(
    redis_client: Any, prefix: str
) -> None:
    """``limit_wake.lua`` on a listed limit of 2: with names noted and a slot
    free, the oldest is woken (but the one passed over), with the limit its
    head asked, whether the rest of its work is to stay held (then it is
    noted again, behind the others, until ``limit_forget.lua`` takes it
    out) and whether the limit has room for one more; slots in flight count
    as taken; with none noted, nobody; with a blocking waiter queued, nobody
    is woken (the waiter is handed the slot) and the noted name keeps its place."""
    from celery_redislock.core.keys import LeaseKeys
    from celery_redislock.core.scripts import LIMIT_BLOCK, LIMIT_FORGET, LIMIT_WAKE
    from celery_redislock.core.semaphore import FairSemaphore

    limit = f"shared-{uuid.uuid4().hex[:8]}"
    keys = LeaseKeys(prefix, limit)
    script_keys = [*keys.lease_keys(), *keys.blocked_keys()]
    first, second, third = (
        FairSemaphore(redis_client, limit, 2, ttl=30, prefix=prefix) for _ in range(3)
    )
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    assert LIMIT_BLOCK(redis_client, script_keys, ["acct:k", 2, 60_000, 0, 1, 0]) == 1  # noted
    assert LIMIT_BLOCK(redis_client, script_keys, ["acct:i", 2, 60_000, 0, 0, 0]) == 1
    assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, ""]) == []  # noted, but no room
    first.release()
    # the slot in flight: a task published for it
    assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, "promoted."]) == []
    woken = LIMIT_WAKE(redis_client, script_keys, ["acct:k", 60_000, ""])
    assert woken == [b"acct:i", 2, 0, 0]  # passed over; no room for one more
    second.release()
    woken = LIMIT_WAKE(redis_client, script_keys, ["", 60_000, ""])
    assert woken == [b"acct:k", 2, 1, 1]  # noted to hold, so noted again; room for one more
    assert redis_client.zrange(keys.blocked, 0, -1) == [b"acct:k"]
    assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, "promoted."]) == [b"acct:k", 2, 1, 0]
    assert LIMIT_FORGET(redis_client, keys.blocked_keys(), ["acct:k", 60_000]) == 1
    assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, ""]) == []  # nobody left
    assert second.acquire(blocking=False)

    assert first.acquire(blocking=False)
    assert LIMIT_BLOCK(redis_client, script_keys, ["acct:j", 2, 60_000, 0, 0, 0]) == 1
    waiter = threading.Thread(target=third.acquire, kwargs={"blocking": True, "timeout": 30})
    waiter.start()
    try:
        wait_for(lambda: third.waiters(), 10, message="the waiter queued")
        assert LIMIT_WAKE(redis_client, script_keys, ["", 60_000, ""]) == []
        assert redis_client.zrange(keys.blocked, 0, -1) == [b"acct:j"]
    finally:
        second.release()  # hands the slot to the waiter
        waiter.join(timeout=30)
    assert not waiter.is_alive() and third.token is not None
    for held in (first, third):
        held.release()
