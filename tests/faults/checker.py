"""Reads the history and reports, per property, what was checked and what broke.

What can be asserted soundly from client-side records (all times are Redis
TIME of the recording server, the same clock as the server under test):

* A holding interval is ``[enter, exit]``: ``enter`` is recorded after
  acquire returned (so after the grant), ``exit`` before the release request
  is sent (so before the release), and the client acts on the resource only
  in between.  The recorded interval therefore lies *inside* the real lease,
  and two recorded intervals that overlap prove two real leases overlapped:
  no false alarms.  A holder SIGKILLed in between ends at the kill (stamped
  after the process was reaped).
* Property 2 (exclusion, limit) is checked on *clean* intervals only: those
  that no unsafe fault touched (a pause of that holder, a pause or restart of
  Redis, a deletion of that lock's keys during the interval).  Overlaps
  involving an excused interval are what fencing is for (property 1).
* Property 1 does not trust the resource's own check: every client writes
  ``value + 1`` computed from its fenced read, so two accepted writes of the
  same value are a lost update, and along the resource's order of values
  (1, 2, 3, ...) the writers' tokens must strictly increase.
* Property 4: a holder "learns" of a loss by the ``on_lost`` callback, by
  ``owned()`` returning False before its write, or by ``release()`` raising.
  A loss is expected only when the fault certainly hit the lease while the
  client was still using it (its ``exit`` came after the moment of loss).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .injector import UNSAFE


@dataclass
class Row:
    title: str
    ops: int = 0
    faults: int = 0
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)


@dataclass
class Interval:
    c: str
    r: str
    tok: int
    start: float
    end: float | None = None
    excused: bool = False
    stalled: bool = False  # the holder itself reported the lease lost, no fault did it


def check(
    events: list[dict[str, Any]], settings: Any, limits: dict[str, int]
) -> tuple[dict[str, Row], dict[str, float]]:
    """Rows per property ("1".."5") and headline figures."""
    interval_s = settings.ttl / 3
    bound = interval_s + settings.grace
    history_end = events[-1]["t"] if events else 0.0
    faults = _fault_windows(events)
    injected: dict[str, int] = defaultdict(int)
    for f in faults:
        injected[f["kind"]] += 1
    faults_end = next((e["t"] for e in events if e["e"] == "phase" and e["name"] == "calm"), None)

    intervals: dict[tuple[str, str, int], Interval] = {}
    for e in events:
        if e["e"] == "enter":
            intervals[(e["c"], e["r"], e["tok"])] = Interval(e["c"], e["r"], e["tok"], e["t"])
        elif e["e"] == "exit":
            intervals[(e["c"], e["r"], e["tok"])].end = e["t"]
    for f in faults:
        if f["kind"] == "holder_kill" or f["kind"] == "reaped":
            for iv in intervals.values():
                if iv.c == f["victim"] and iv.end is None:
                    iv.end = f["end"]
    for iv in intervals.values():
        if iv.end is None:
            iv.end = history_end
        iv.excused = any(_touches(f, iv) for f in faults if f["kind"] in UNSAFE)
    # A loss the holder was told of with no fault to explain it means its process
    # stalled (machine load) longer than the lease: a pause, out of property 2's
    # scope.  Counted and reported; never seen so far.
    for e in events:
        iv = intervals.get((e["c"], e.get("r", ""), e.get("tok", 0)))  # type: ignore[assignment]
        if e["e"] == "lost" and iv is not None and not iv.excused:
            iv.excused = iv.stalled = True

    rows = {
        "1": _fencing(events, faults),
        "2": _exclusion(intervals, limits, injected, _skews(events)),
        "3": _liveness(events, faults, faults_end, settings, bound),
        "4": _detection(events, faults, intervals, settings, bound),
    }
    figures: dict[str, float] = {}
    for row in rows.values():
        figures.update(row.figures)
    return rows, figures


def _fault_windows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each fault as its end event plus ``start``/``end`` times; ``reaped``
    (a client killed by the runner at the end) counts as a kill."""
    starts: dict[int, float] = {}
    windows = []
    for e in events:
        if e["e"] == "fault" and e["at"] == "start":
            starts[e["fid"]] = e["t"]
        elif e["e"] == "fault" and e["at"] == "end":
            start = starts.pop(e["fid"])
            if e.get("deleted") is False:
                continue  # a lease deletion that found its victim gone: no fault
            windows.append({**e, "start": start, "end": e["t"]})
        elif e["e"] == "reaped":
            windows.append({**e, "kind": "reaped", "start": e["t"], "end": e["t"]})
    return windows


def _deadline_with_later_faults(
    f: dict[str, Any], deadline: float, when: float, faults: list[dict[str, Any]], bound: float
) -> float:
    """Extend ``deadline`` past every Redis pause or restart that starts after
    fault ``f``, before the deadline and before the holder learned (``when``)."""
    for g in sorted(faults, key=lambda g: g["start"]):
        if g["kind"] in ("redis_pause", "redis_restart") and (
            f["start"] < g["start"] <= min(deadline, when)
        ):
            deadline = max(deadline, g["end"] + bound)
    return deadline


def _touches(f: dict[str, Any], iv: Interval) -> bool:
    assert iv.end is not None
    if f["start"] > iv.end or f["end"] < iv.start:
        return False
    if f["kind"] in ("redis_pause", "redis_restart"):
        return True
    if f["kind"] == "holder_pause":
        return bool(f["victim"] == iv.c)
    if f["kind"] == "lease_delete":
        return bool(f["r"] == iv.r)
    return False


def _fencing(events: list[dict[str, Any]], faults: list[dict[str, Any]]) -> Row:
    row = Row("1. fenced writes in token order; no stale write accepted")
    row.faults = sum(1 for f in faults if f["kind"] in UNSAFE)
    writes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    refused = refused_after_loss = accepted_after_loss = 0
    for e in events:
        if e["e"] == "read":
            row.ops += 1
        if e["e"] != "write":
            continue
        row.ops += 1
        if e["acc"]:
            writes[e["r"]].append(e)
            accepted_after_loss += not e["owned"]
        else:
            refused += 1
            refused_after_loss += not e["owned"]
    for name, accepted in writes.items():
        by_value: dict[int, dict[str, Any]] = {}
        for w in accepted:
            if w["new"] in by_value:
                other = by_value[w["new"]]
                row.violations.append(
                    f"{name}: lost update, value {w['new']} written by token {other['tok']} "
                    f"(client {other['c']}) and token {w['tok']} (client {w['c']})"
                )
            by_value[w["new"]] = w
        previous: dict[str, Any] | None = None
        for value in sorted(by_value):
            w = by_value[value]
            if previous is not None and w["tok"] <= previous["tok"]:
                row.violations.append(
                    f"{name}: value {value} written with token {w['tok']} after value "
                    f"{previous['new']} with token {previous['tok']}"
                )
            previous = w
    row.notes.append(f"stale writes refused by the fence: {refused}")
    row.notes.append(
        f"writes after owned() turned False: {refused_after_loss} refused, "
        f"{accepted_after_loss} accepted (no newer holder had touched it)"
    )
    return row


def _skews(events: list[dict[str, Any]]) -> dict[str, float]:
    """Per client, the offset of its time.time() from Redis TIME, rounded to
    10 s (0 for the ordinary clients), as seen at each ``enter``."""
    return {e["c"]: round((e["lt"] - e["t"]) / 10) * 10.0 for e in events if e["e"] == "enter"}


def _exclusion(
    intervals: dict[tuple[str, str, int], Interval],
    limits: dict[str, int],
    injected: dict[str, int],
    skews: dict[str, float],
) -> Row:
    row = Row("2. exclusion / semaphore limit (no pause or restart)")
    row.faults = injected["holder_kill"] + injected["client_kill"]
    by_name: dict[str, list[Interval]] = defaultdict(list)
    excused = 0
    for iv in intervals.values():
        if iv.excused:
            excused += 1
        else:
            by_name[iv.r].append(iv)
            row.ops += 1
    for name, ivs in by_name.items():
        limit = limits[name]
        points = sorted(
            [(iv.start, 1, iv) for iv in ivs] + [(iv.end or iv.start, -1, iv) for iv in ivs],
            key=lambda p: (p[0], p[1]),  # an exit at the same instant counts first
        )
        active: list[Interval] = []
        for _, step, iv in points:
            if step < 0:
                active.remove(iv)
                continue
            active.append(iv)
            if len(active) > limit:
                row.violations.append(
                    f"{name} (limit {limit}): {len(active)} holders at once: "
                    + ", ".join(
                        f"client {a.c} token {a.tok} [{a.start:.3f}, {a.end:.3f}]" for a in active
                    )
                )
    stalled = sum(iv.stalled for iv in intervals.values())
    row.notes.append(
        f"intervals excused by a pause/restart/deletion: {excused - stalled}, by a holder "
        f"stall longer than the TTL: {stalled}"
    )
    skewed = {c: s for c, s in skews.items() if s}
    row.notes.append(
        f"{sum(1 for iv in intervals.values() if iv.c in skewed)} intervals held by "
        f"{len(skewed)} clients whose clocks were off by "
        + "/".join(sorted({f"{s:+.0f} s" for s in skewed.values()}))
    )
    return row


def _liveness(
    events: list[dict[str, Any]],
    faults: list[dict[str, Any]],
    faults_end: float | None,
    settings: Any,
    bound: float,
) -> Row:
    row = Row("3. liveness after faults; crash recovery within TTL + interval")
    row.faults = sum(1 for f in faults if f["kind"] == "holder_kill")
    pending: dict[str, dict[str, Any]] = {}
    outcomes = {"enter", "timeout", "acq_err"}
    for e in events:
        if e["e"] == "req":
            pending[e["c"]] = e
        elif e["e"] in outcomes and e["c"] in pending:
            req = pending.pop(e["c"])
            if faults_end is not None and req["t"] >= faults_end:
                row.ops += 1
                if e["e"] != "enter":
                    row.violations.append(
                        f"client {e['c']} asked for {req['r']} after the faults stopped and got "
                        f"{e['e']} {e.get('err', '')}"
                    )
    for c, req in pending.items():
        if faults_end is not None and req["t"] >= faults_end:
            row.violations.append(f"client {c} asked for {req['r']} and never got an answer")
    worst_freed = worst_next = 0.0
    for e in events:
        if e["e"] != "freed":
            continue
        row.ops += 1
        if not e["ok"]:
            row.violations.append(f"{e['r']}: lease of killed owner {e['owner']} never freed")
            continue
        freed = e["t"] - e["killed_at"]
        worst_freed = max(worst_freed, freed)
        if freed > settings.ttl + bound:
            row.violations.append(f"{e['r']}: freed {freed:.2f} s after the holder was killed")
        nxt = next(
            (
                n
                for n in events
                if n["e"] == "enter"
                and n["r"] == e["r"]
                and n["t"] > e["killed_at"]
                and n.get("owner") != e["owner"]
            ),
            None,
        )
        if nxt is not None:
            worst_next = max(worst_next, nxt["t"] - e["killed_at"])
    row.figures["worst_freed"] = worst_freed
    row.figures["worst_next_holder"] = worst_next
    row.notes.append(
        f"killed holder's lease freed within {worst_freed:.2f} s (bound TTL + interval + "
        f"grace = {settings.ttl + bound:.2f} s); next holder in at most {worst_next:.2f} s"
    )
    return row


def _detection(
    events: list[dict[str, Any]],
    faults: list[dict[str, Any]],
    intervals: dict[tuple[str, str, int], Interval],
    settings: Any,
    bound: float,
) -> Row:
    row = Row("4. a holder learns of its lost lease within one heartbeat interval")
    learned: dict[tuple[str, str, int], float] = {}
    for e in events:
        key = (e["c"], e.get("r", ""), e.get("tok", 0))
        if (
            e["e"] == "lost"
            or (e["e"] == "write" and not e["owned"])
            or (e["e"] in ("rel", "refresh") and not e.get("ok"))
        ):
            learned.setdefault(key, e["t"])
    worst: dict[str, float] = {}
    already = overlapped = 0
    for f in faults:
        kind = f["kind"]
        if kind not in UNSAFE:
            continue
        row.faults += 1
        # ref: when the loss became real and observable; lost_at: from when a
        # holder still using its lease must have lost it.
        if kind == "redis_pause":
            lost_at = ref = min(f["start"] + settings.ttl, f["end"])
        elif kind == "holder_pause":
            lost_at = ref = f["end"]
        else:  # redis_restart, lease_delete: gone at once, observable after the end
            lost_at, ref = f["start"], f["end"]
        for key, iv in intervals.items():
            assert iv.end is not None
            if not (iv.start <= f["start"] and iv.end > lost_at):
                continue
            if kind == "holder_pause" and iv.c != f["victim"]:
                continue
            if kind == "lease_delete" and (iv.r, iv.tok) != (f["r"], f["tok"]):
                continue
            if any(
                k["kind"] in ("holder_kill", "reaped")
                and k["victim"] == iv.c
                and k["end"] == iv.end
                for k in faults
            ):
                continue  # killed before it could learn anything
            row.ops += 1
            when = learned.get(key)
            if when is None:
                row.violations.append(
                    f"{kind}: client {iv.c} never learned it lost {iv.r} token {iv.tok}"
                )
                continue
            if when < f["start"]:
                already += 1  # lost to an earlier fault, and knew it already
                continue
            delay = when - ref
            # Redis paused or restarted again before the holder's next beat could
            # ask: the holder can learn only once Redis answers again, or from its
            # local deadline.  Such losses get the later fault's bound and are not
            # counted in the worst delay.
            deadline = _deadline_with_later_faults(f, ref + bound, when, faults, bound)
            if deadline == ref + bound:
                worst[kind] = max(worst.get(kind, -1e9), delay)
            else:
                overlapped += 1
            if when > deadline:
                row.violations.append(
                    f"{kind}: client {iv.c} learned it lost {iv.r} token {iv.tok} "
                    f"{delay:.2f} s after the loss (bound {deadline - ref:.2f} s)"
                )
    # An explicit refresh() sent after a fault certainly took the lease must fail:
    # an expired or deleted lease is never revived.
    refreshes = [e for e in events if e["e"] == "refresh"]
    for e in refreshes:
        held = intervals.get((e["c"], e["r"], e["tok"]))
        if not e["ok"] or held is None:
            continue
        for f in faults:
            took = f["kind"] in ("redis_pause", "redis_restart") or (
                f["kind"] in ("holder_pause", "lease_delete")
                and (f["victim"], f["tok"]) == (e["c"], e["tok"])
            )
            if took and held.start < f["start"] and f["end"] < e["sent"]:
                row.violations.append(
                    f"refresh() of {e['r']} token {e['tok']} (client {e['c']}) succeeded "
                    f"after a {f['kind']} had taken the lease"
                )
    row.notes.append(
        f"explicit refresh() calls: {sum(1 for e in refreshes if e['ok'])} renewed, "
        f"{sum(1 for e in refreshes if e['ok'] is False)} found the lease gone, "
        f"{sum(1 for e in refreshes if e['ok'] is None)} raised"
    )
    spurious = [
        e
        for e in events
        if e["e"] == "lost"
        and (e["c"], e["r"], e["tok"]) in intervals
        and intervals[(e["c"], e["r"], e["tok"])].stalled
    ]
    for kind, delay in sorted(worst.items()):
        row.notes.append(f"{kind}: worst delay {delay:+.2f} s")
    if already:
        row.notes.append(f"{already} holders hit again after learning of an earlier loss")
    if overlapped:
        row.notes.append(
            f"{overlapped} losses followed by another Redis pause/restart before the next "
            "beat (bound extended to that fault's)"
        )
    if worst:
        row.figures["worst_detection"] = max(worst.values())
    row.notes.append(f"losses reported without an unsafe fault: {len(spurious)}")
    false_lost = []
    for e in events:
        key = (e["c"], e.get("r", ""), e.get("tok", 0))
        if e["e"] == "rel" and e.get("lost") and key in intervals:
            until_release = Interval(e["c"], e["r"], e["tok"], intervals[key].start, e["t"])
            if not any(_touches(f, until_release) for f in faults if f["kind"] in UNSAFE):
                false_lost.append(e)
    row.notes.append(f"release() raising LockLost without an unsafe fault: {len(false_lost)}")
    return row
