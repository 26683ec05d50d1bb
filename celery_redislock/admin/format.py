"""The text output of ``celery redislock``: what ``status``, ``parked`` and
``release`` print for people (``--json`` output is built by the commands).

Pure formatting: nothing here reads Redis.  Guaranteed: every holder of a
listed name is shown (token, task id and name, host and pid, when its worker
process last stated its holdings, age, remaining lease / ttl, owner); park
reservations are shown apart from running holders; waiters are listed in
arrival order, up to the number asked for, with the count of the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..core.inspection import LeaseSetState, Snapshot, task_id_of
from ..core.rate import Rate
from .alive import Alive

__all__ = ["format_parked", "format_snapshot", "who"]


def who(owner: str, meta: dict[str, Any]) -> str:
    task = task_id_of(owner, meta)
    where = f"{meta.get('host', '?')}:{meta.get('pid', '?')}"
    if task:
        return f"task {task} [{meta.get('task', '?')}] on {where}"
    return f"pid {where}"


def _seconds(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:.1f}h"
    if value >= 60:
        return f"{value / 60:.1f}m"
    return f"{value:.1f}s"


def _rate(rate: Rate | None, burst: int) -> str:
    """A rate per second, per minute or per hour, whichever reads as a number >= 1."""
    if rate is None:
        return ""
    per, unit = rate.per_second, "s"
    for factor, bigger in ((60, "m"), (60, "h")):
        if per >= 1:
            break
        per, unit = per * factor, bigger
    return f", rate {per:.4g}/{unit}" + (f" burst {burst}" if burst > 1 else "")


def format_parked(rows: Iterable[Any], entries: bool = False) -> list[str]:
    lines = []
    for r in rows:
        timing = (f", paused {_age(r.paused_for)}" if r.paused_for else "") + (
            f", next due in {r.head_due_in:.3f}s" if r.head_due_in else ""
        )
        if r.waits_for:
            timing += f", waits for listed limit {r.waits_for!r}"
        limit = f", limit {r.limit}" if r.limit else ""
        lines.append(
            f"{r.name}  [parked]  {r.parked} parked (oldest {_age(r.oldest_age)}), "
            f"{r.in_flight} promoted not yet arrived, {r.overdue} overdue{limit}"
            f"{_rate(r.rate, r.burst)}{timing}"
        )
        for e in r.entries if entries else ():
            lines.append(f"  {e['task_id']}  {e['task']}{e['argsrepr'] or ''}  {_age(e['age'])}")
        for e in r.promoted if entries else ():
            lines.append(
                f"  {e['task_id']}  {e['task']}{e['argsrepr'] or ''}  {_age(e['age'])}  "
                f"promoted, deadline in {_age(e['deadline_in'])}"
            )
    return lines


def _alive(stated: dict[str, Alive], owner: str) -> str:
    """The ALIVE column (admin/alive.py): when the holder's worker process last
    stated its holdings (every ttl/3 while it holds any): an age well above
    that means the process is gone or stuck; ">N ago" when it stopped stating
    and its record expired.  "-" for reservations and holders outside a
    worker, which state nothing."""
    alive = stated.get(owner)
    if alive is None:
        return "-"
    return f"{'>' if alive.silent else ''}{_seconds(alive.ago)} ago"


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def format_snapshot(snap: Snapshot, url: str, max_waiters: int, stated: dict[str, Alive]) -> str:
    reserved = sum(1 for ls in snap.lease_sets for h in ls.holders if h.meta.get("reserved"))
    held = sum(len(ls.holders) for ls in snap.lease_sets) - reserved
    waiting = sum(len(ls.waiters) for ls in snap.lease_sets)
    if not snap.lease_sets:
        return f"nothing held or waiting under prefix {snap.prefix!r} on {url}"
    also = f", {reserved} reserved for promoted tasks" if reserved else ""
    lines = [
        f"{len(snap.lease_sets)} lock(s)/semaphore(s) under prefix {snap.prefix!r} on {url}: "
        f"{held} held{also}, {waiting} waiting",
    ]
    for ls in snap.lease_sets:
        lines += ["", *_format_state(ls, max_waiters, stated)]
    return "\n".join(lines)


def _format_state(ls: LeaseSetState, max_waiters: int, stated: dict[str, Alive]) -> list[str]:
    limit = f"/{ls.limit}" if ls.limit is not None else ""
    # A park reservation holds a slot for a promoted task whose message is on its
    # way: it is not a running holder, and is shown apart.
    reserved = [h for h in ls.holders if h.meta.get("reserved")]
    running = len(ls.holders) - len(reserved)
    also = f" (+{len(reserved)} reserved for promoted tasks)" if reserved else ""
    lines = [f"{ls.name}  [{ls.kind}]  held {running}{also}{limit}  waiting {len(ls.waiters)}"]
    rows = [("TOKEN", "TASK ID", "TASK", "HOST:PID", "ALIVE", "AGE", "TTL LEFT", "OWNER")]
    for h in ls.holders:
        is_reservation = bool(h.meta.get("reserved"))
        rows.append(
            (
                str(h.token),
                str(h.meta.get("task_id") or "-")
                if is_reservation
                else task_id_of(h.owner, h.meta) or "-",
                "(promoted, not yet started)" if is_reservation else str(h.meta.get("task") or "-"),
                "-" if is_reservation else f"{h.meta.get('host', '?')}:{h.meta.get('pid', '?')}",
                _alive(stated, h.owner),
                _seconds(max(ls.now - h.acquired_at, 0.0)),
                f"{_seconds(max(h.expires_in, 0.0))}/{_seconds(h.ttl)}",
                h.owner,
            )
        )
    if ls.holders:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += [
            "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows
        ]
    for i, w in enumerate(ls.waiters[:max_waiters]):
        lines.append(f"  waiting #{i + 1}: {who(w.owner, w.meta)}  owner {w.owner}")
    if len(ls.waiters) > max_waiters:
        lines.append(f"  ... and {len(ls.waiters) - max_waiters} more waiting")
    return lines
