"""The fault-injection suite (tests/faults/), short mode, plus tests of its checker.

Short mode: 40 s of faults against 16 client processes, then 15 s of kills
of celery workers with Redis as the broker and 15 s with RabbitMQ (when it
answers at ``FAULTS_AMQP_URL``, default the local one; else that row says
so): about 150 s in all, plus 25 s for the self-test.  ``FAULTS_LONG=1``
runs 10 minutes of faults (and 200 s per broker), ``FAULTS_SECONDS=N`` any
length, ``FAULTS_SEED=S`` replays a fault schedule (the seed is printed
first).  The per-property report is printed (also without ``-s``) and
written to ``$FAULTS_REPORT`` when set.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.faults.celery_run import check_celery
from tests.faults.checker import check
from tests.faults.run import Settings, run


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_guarantees_hold_under_random_faults(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    settings = Settings.from_env()
    with capsys.disabled():  # the seed first, so even a run that hangs can be replayed
        print(f"\nfault injection seed {settings.seed} (replay with FAULTS_SEED={settings.seed})")
    outcome = run(settings, tmp_path)
    report = outcome.report()
    with capsys.disabled():
        print("\n" + report)
    if os.environ.get("FAULTS_REPORT"):
        Path(os.environ["FAULTS_REPORT"]).write_text(report + "\n")
    rows = outcome.rows
    assert sorted(rows) == ["1", "2", "3", "4", "5", "6", "6b"]  # 6b: RabbitMQ, if reachable
    for key, row in rows.items():
        assert row.violations == [], f"property {key} violated (seed {settings.seed}):\n{report}"
    # The run must have exercised what it claims to check.
    assert all(n > 0 for n in outcome.injected.values()), outcome.injected
    assert rows["1"].ops > 100 and rows["2"].ops > 100 and rows["3"].ops > 10
    assert rows["4"].ops > 0, "no lease was lost under the faults: nothing to detect"
    assert rows["6"].ops > 10 and outcome.injected["child_kill"] > 0
    assert outcome.figures["worst_detection"] <= settings.ttl / 3 + settings.grace
    assert outcome.figures["worst_freed"] <= settings.ttl + settings.ttl / 3 + settings.grace


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_suite_catches_clients_without_fencing_or_heartbeat(tmp_path: Path) -> None:
    """Self-test end to end: the same harness, with clients that write the
    resource with plain GET/SET and never renew their leases, must report
    lost updates (property 1) and overlapping holders (property 2)."""
    settings = Settings(
        seconds=10,
        calm=2,
        celery=False,
        faults=("holder_pause",),
        mutants=("no-fence", "no-heartbeat"),
        long_share=0.3,
    )
    outcome = run(settings, tmp_path)
    # The violations are expected here: the report is shown only if they are missing.
    report = "Self-test with broken clients:\n" + outcome.report()
    assert any("lost update" in v for v in outcome.rows["1"].violations), report
    assert any("holders at once" in v for v in outcome.rows["2"].violations), report


# -- the checker finds what it should, on made-up histories --------------------

S = Settings(ttl=3.0, grace=0.0)
LIMITS = {"L": 1, "S": 2}


def ev(t: float, c: str, e: str, **fields: Any) -> dict[str, Any]:
    return {"t": t, "c": c, "e": e, **fields}


def hold(c: str, r: str, tok: int, start: float, end: float) -> list[dict[str, Any]]:
    return [
        ev(start - 0.01, c, "req", r=r),
        ev(start, c, "enter", r=r, tok=tok, owner=f"o{tok}", lt=start),
        ev(end, c, "exit", r=r, tok=tok),
        ev(end + 0.01, c, "rel", r=r, tok=tok, ok=True),
    ]


def by_time(*groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((e for g in groups for e in g), key=lambda e: e["t"])


def test_checker_accepts_a_clean_history() -> None:
    events = by_time(
        hold("1", "L", 1, 0, 1),
        hold("2", "L", 2, 1.5, 2),
        hold("3", "S", 3, 0, 2),
        hold("4", "S", 4, 0.5, 1),
        hold("5", "S", 5, 1.2, 3),
    )
    rows, _ = check(events, S, LIMITS)
    assert all(not row.violations for row in rows.values())
    assert rows["2"].ops == 5


def test_checker_finds_overlapping_lock_holders_and_too_many_slots() -> None:
    events = by_time(
        hold("1", "L", 1, 0, 1),
        hold("2", "L", 2, 0.9, 2),
        hold("3", "S", 3, 0, 2),
        hold("4", "S", 4, 0.5, 1),
        hold("5", "S", 5, 0.8, 3),
    )
    violations = check(events, S, LIMITS)[0]["2"].violations
    assert len(violations) == 2
    assert "L (limit 1): 2 holders" in violations[0] or "L (limit 1): 2 holders" in violations[1]


def test_checker_excuses_overlap_only_where_an_unsafe_fault_hit() -> None:
    pause = [
        ev(0.5, "inj", "fault", kind="holder_pause", at="start", fid=1, victim="1", r="L", tok=1),
        ev(0.8, "inj", "fault", kind="holder_pause", at="end", fid=1, victim="1", r="L", tok=1),
        ev(0.85, "1", "lost", r="L", tok=1),
    ]
    events = by_time(hold("1", "L", 1, 0, 1), hold("2", "L", 2, 0.9, 2), pause)
    rows, _ = check(events, S, LIMITS)
    assert rows["2"].violations == []
    assert rows["4"].ops == 1 and rows["4"].violations == []
    # the same pause of another client excuses nothing
    other = [dict(e, victim="9") for e in pause if e["e"] == "fault"]
    events = by_time(hold("1", "L", 1, 0, 1), hold("2", "L", 2, 0.9, 2), other)
    assert check(events, S, LIMITS)[0]["2"].violations


def test_checker_excuses_a_holder_that_was_told_of_a_loss_no_fault_caused() -> None:
    """A process stalled by load beyond its TTL is a pause: reported, excused."""
    told = [ev(0.95, "1", "lost", r="L", tok=1)]
    rows, _ = check(by_time(hold("1", "L", 1, 0, 1), hold("2", "L", 2, 0.9, 2), told), S, LIMITS)
    assert rows["2"].violations == []
    assert any("stall longer than the TTL: 1" in n for n in rows["2"].notes)
    assert any("losses reported without an unsafe fault: 1" in n for n in rows["4"].notes)


def test_checker_finds_a_lost_update_and_tokens_out_of_order() -> None:
    def write(t: float, c: str, tok: int, new: int) -> dict[str, Any]:
        return ev(t, c, "write", r="L", tok=tok, prev=new - 1, new=new, acc=True, owned=True)

    lost_update = [write(1, "1", 1, 1), write(2, "2", 2, 1)]
    assert "lost update" in check(lost_update, S, LIMITS)[0]["1"].violations[0]
    out_of_order = [write(1, "1", 5, 1), write(2, "2", 4, 2)]
    assert "token 4 after value 1" in check(out_of_order, S, LIMITS)[0]["1"].violations[0]
    assert check([write(1, "1", 4, 1), write(2, "2", 5, 2)], S, LIMITS)[0]["1"].violations == []


def test_checker_finds_a_loss_never_or_late_learned() -> None:
    delete = [
        ev(0.5, "inj", "fault", kind="lease_delete", at="start", fid=1, victim="1", r="L", tok=1),
        ev(0.51, "inj", "fault", kind="lease_delete", at="end", fid=1, victim="1", r="L", tok=1),
    ]
    never = check(by_time(hold("1", "L", 1, 0, 3), delete), S, LIMITS)[0]["4"]
    assert "never learned" in never.violations[0]
    late = check(
        by_time(hold("1", "L", 1, 0, 3), delete, [ev(2.0, "1", "lost", r="L", tok=1)]), S, LIMITS
    )[0]["4"]
    assert "learned it lost L token 1 1.49 s after" in late.violations[0]
    in_time = by_time(hold("1", "L", 1, 0, 3), delete, [ev(1.0, "1", "lost", r="L", tok=1)])
    assert check(in_time, S, LIMITS)[0]["4"].violations == []


def test_checker_gives_a_loss_followed_by_a_redis_pause_that_pause_s_bound() -> None:
    delete = [
        ev(0.5, "inj", "fault", kind="lease_delete", at="start", fid=1, victim="1", r="L", tok=1),
        ev(0.51, "inj", "fault", kind="lease_delete", at="end", fid=1, victim="1", r="L", tok=1),
        ev(1.0, "inj", "fault", kind="redis_pause", at="start", fid=2),
        ev(4.0, "inj", "fault", kind="redis_pause", at="end", fid=2),
    ]
    learned = [ev(4.5, "1", "rel", r="L", tok=1, err="TimeoutError")]
    row = check(by_time(hold("1", "L", 1, 0, 3), delete, learned), S, LIMITS)[0]["4"]
    assert row.violations == []
    assert any("1 losses followed by another Redis pause" in n for n in row.notes)
    late = [ev(5.5, "1", "rel", r="L", tok=1, err="TimeoutError")]
    assert check(by_time(hold("1", "L", 1, 0, 3), delete, late), S, LIMITS)[0]["4"].violations


def test_checker_finds_a_refresh_that_revived_a_deleted_lease() -> None:
    delete = [
        ev(0.5, "inj", "fault", kind="lease_delete", at="start", fid=1, victim="1", r="L", tok=1),
        ev(0.51, "inj", "fault", kind="lease_delete", at="end", fid=1, victim="1", r="L", tok=1),
    ]
    revived = [ev(1.0, "1", "refresh", r="L", tok=1, sent=0.9, ok=True)]
    row = check(by_time(hold("1", "L", 1, 0, 3), delete, revived), S, LIMITS)[0]["4"]
    assert any("succeeded after a lease_delete" in v for v in row.violations)
    refused = [ev(1.0, "1", "refresh", r="L", tok=1, sent=0.9, ok=False)]
    row = check(by_time(hold("1", "L", 1, 0, 3), delete, refused), S, LIMITS)[0]["4"]
    assert row.violations == [] and row.ops == 1


def test_checker_finds_waiters_starved_after_the_faults() -> None:
    events = [
        ev(0, "inj", "phase", name="calm"),
        ev(1, "1", "req", r="L"),
        ev(21, "1", "timeout", r="L"),
        ev(2, "2", "req", r="L"),
    ]
    violations = check(sorted(events, key=lambda e: e["t"]), S, LIMITS)[0]["3"].violations
    assert any("got timeout" in v for v in violations)
    assert any("never got an answer" in v for v in violations)


def body(t0: float, t1: float | None, task: str, r: str, pid: int, n: int) -> list[dict[str, Any]]:
    start = ev(t0, "body", "body_start", r=r, n=n, id=task, pid=pid, tok=n)
    return (
        [start] if t1 is None else [start, ev(t1, "body", "body_end", r=r, n=n, id=task, pid=pid)]
    )


def test_celery_checker_finds_overlapping_bodies_and_unfinished_tasks() -> None:
    kill = [ev(1.5, "inj", "fault", kind="child_kill", at="end", fid=-1, pids=[7])]
    ok = by_time(
        body(0, None, "a", "lock:k", 7, 0),
        kill,
        body(2, 3, "a", "lock:k", 8, 1),
        body(1, 1.4, "b", "sem:s", 9, 2),
        body(1.2, 2, "c", "sem:s", 10, 3),
    )
    assert check_celery(ok, ["a", "b", "c"], {"SUCCESS": 3}, [], 0).violations == []
    overlap = by_time(body(0, 2, "a", "lock:k", 7, 0), body(1, 3, "b", "lock:k", 8, 1))
    row = check_celery(overlap, ["a", "b"], {"SUCCESS": 2}, [], 0)
    assert row.violations == ["lock:k: 2 bodies at once at 1.000 (limit 1)"]
    never = check_celery(body(0, None, "a", "lock:k", 7, 0), ["a", "b"], {"RETRY": 2}, [], 0)
    assert any("never ended and was not killed" in v for v in never.violations)
    assert any("2 tasks never completed a body" in v for v in never.violations)
    # a message lost by the Redis transport is accepted only up to one per worker kill
    lost = body(0, 1, "a", "lock:k", 7, 0)
    assert check_celery(lost, ["a", "b"], {"SUCCESS": 1, "RETRY": 1}, ["b"], 1).violations == []
    assert check_celery(lost, ["a", "b"], {"SUCCESS": 1, "RETRY": 1}, ["b"], 0).violations
