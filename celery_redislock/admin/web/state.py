"""What the live web view shows, read from Redis as JSON-ready dicts.

Read-only, and bounded like ``status``: the overview is ``status --top``'s
frame (:func:`~celery_redislock.admin.top.top_rows`: the SCAN of the lease sets,
never ``KEYS``, and the park's index) cut to the :data:`MAX_KEYS` busiest
keys, then one pipelined read of those keys' holders and one park read per
shown key with parked or promoted work.  A key's page reads that key only,
with up to ``count`` of its parked tasks in order.

Every string here (names, task names, task ids, arguments) is user data:
the page renders it as text, never as markup.
"""

from __future__ import annotations

from typing import Any

from ... import parking
from ...core.holders import Holder, Waiter
from ...core.inspection import LeaseSetState, inspect_names, task_id_of
from ...core.override import Overrides
from ...core.park import Parking, ParkStatus
from ...core.rate import Rate
from ..alive import Alive, statement_ages
from ..keyrows import KeyRow, kind_and_limit
from ..target import Target
from ..top import top_rows

__all__ = ["MAX_HOLDERS", "MAX_KEYS", "NEAR", "key_page", "level", "overview"]

#: keys listed by the overview at most (the busiest first)
MAX_KEYS = 200
#: holders listed by the overview at most (a key's page lists all of its own)
MAX_HOLDERS = 300
#: a key is "near" its cap when held + reserved reach this share of its limit
NEAR = 0.8


def _rate(rate: Rate | None) -> str | None:
    return None if rate is None else str(rate)


def level(held: int, limit: int | None) -> str:
    """The cap reached: "over", "at", "near" or "below"; "-" when the limit is unknown."""
    if not limit:
        return "-"
    if held > limit:
        return "over"
    if held == limit:
        return "at"
    return "near" if held >= NEAR * limit else "below"


def _holders(state: LeaseSetState, stated: dict[str, Alive]) -> list[dict[str, Any]]:
    """Holders as ``status`` shows them: ``alive_ago`` is its ALIVE column
    (seconds since the holder's worker process last stated its holdings;
    None when it states nothing; with ``alive_silent`` the least time since it
    stopped, see admin/alive.py), ``renewed_ago`` the time since the lease
    was last renewed (its ttl minus what is left; None for a park
    reservation, which is not renewed)."""
    rows = []
    for h in state.holders:
        reserved = bool(h.meta.get("reserved"))
        alive = stated.get(h.owner)
        ago = None if alive is None else alive.ago
        rows.append(
            {
                "name": state.name,
                "owner": h.owner,
                "token": h.token,
                "reserved": reserved,
                "task_id": (h.meta.get("task_id") if reserved else task_id_of(h.owner, h.meta)),
                "task": None if reserved else h.meta.get("task"),
                "host": None if reserved else h.meta.get("host"),
                "pid": None if reserved else h.meta.get("pid"),
                "held_for": round(max(state.now - h.acquired_at, 0.0), 1),
                "expires_in": round(h.expires_in, 1),
                "ttl": h.ttl,
                "renewed_ago": None
                if reserved
                else round(min(max(h.ttl - h.expires_in, 0), h.ttl), 1),
                "alive_ago": ago,
                "alive_silent": alive is not None and alive.silent,
                # stopped renewing, or its process stopped stating (every ttl/3)
                "suspect": h.expires_in <= 0 or (ago is not None and ago > h.ttl),
            }
        )
    return rows


def _park(park: ParkStatus | None) -> dict[str, Any]:
    if park is None:
        return {"in_flight": 0, "overdue": 0, "rate": None, "burst": 1, "waits_for": None}
    return {
        "in_flight": park.in_flight,
        "overdue": park.overdue,
        "rate": _rate(park.rate),
        "burst": park.burst,
        "waits_for": park.waits_for,
    }


def _tasks(state: LeaseSetState | None, park: ParkStatus | None) -> list[str]:
    names = set(state.task_names if state else ())
    for entry in [*(park.entries if park else ()), *(park.promoted if park else ())]:
        if isinstance(entry.get("task"), str):
            names.add(entry["task"])
    return sorted(names)


def _key_row(row: KeyRow, state: LeaseSetState | None, park: ParkStatus | None) -> dict[str, Any]:
    return {
        "name": row.name,
        "kind": row.kind,
        "held": row.held,
        "reserved": row.reserved,
        "limit": row.limit,
        "level": level(row.held + row.reserved, row.limit),
        "waiting": row.waiting,
        "parked": row.parked,
        "oldest_parked_age": row.oldest_parked_age,
        "paused_for": row.paused_for,
        "next_due_in": row.next_due_in,
        "tasks": _tasks(state, park) or ["(unknown task)"],
        **_park(park),
    }


def _limiters(keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task name: its keys, how many are at or over their cap, held and parked."""
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        for task in key["tasks"]:
            row = out.setdefault(
                task,
                {
                    "task": task,
                    "keys": 0,
                    "at_cap": 0,
                    "near_cap": 0,
                    "held": 0,
                    "parked": 0,
                    "oldest": None,
                },
            )
            row["keys"] += 1
            row["at_cap"] += key["level"] in ("at", "over")
            row["near_cap"] += key["level"] == "near"
            row["held"] += key["held"]
            row["parked"] += key["parked"]
            ages = [a for a in (row["oldest"], key["oldest_parked_age"]) if a is not None]
            row["oldest"] = max(ages, default=None)
    rows = [{**r, "oldest_parked_age": r.pop("oldest")} for r in out.values()]
    return sorted(rows, key=lambda r: (-r["at_cap"], -r["parked"], -r["held"], r["task"]))


def overview(target: Target, match: str = "*", max_keys: int = MAX_KEYS) -> dict[str, Any]:
    """Every busy key (held, waiting or parked; the busiest ``max_keys``),
    grouped by task name (limiter), with holders and the keys' park state."""
    total, rows = top_rows(target, match, max_keys)
    states = {
        s.name: s for s in inspect_names(target.client, target.prefix, [r.name for r in rows])
    }
    in_park = [r.name for r in rows if r.parked or r.reserved]
    parks = {p.name: p for p in parking.status(target.client, target.prefix, in_park, count=1)}
    keys = [_key_row(r, states.get(r.name), parks.get(r.name)) for r in rows]
    shown = [states[r.name] for r in rows if r.name in states]
    stated = statement_ages(target.client, target.prefix, shown)
    holders = [h for s in shown for h in _holders(s, stated)]
    return {
        "url": target.url,
        "prefix": target.prefix,
        "match": match,
        "total": total,
        "keys": keys,
        "limiters": _limiters(keys),
        "holders": holders[:MAX_HOLDERS],
        "holders_total": len(holders),
        "held": sum(k["held"] for k in keys),
        "parked": sum(k["parked"] for k in keys),
        "overdue": sum(k["overdue"] for k in keys),
    }


def key_page(target: Target, name: str, count: int) -> dict[str, Any]:
    """One key: its holders and waiters, its first ``count`` parked tasks in
    order and its promotions in flight, its limit, rate and pause.  Raises
    ``TypeError``/``ValueError`` for a name no key could have."""
    (state,) = target.with_limits(inspect_names(target.client, target.prefix, [name]))
    park = Parking(target.client, target.prefix, name).status(count)
    override = Overrides(target.client, name, target.prefix).get()
    entries: list[Holder | Waiter] = [*state.holders, *state.waiters]
    kind, limit = kind_and_limit(entries, park, override.limit, state.limit)
    reserved = sum(1 for h in state.holders if h.meta.get("reserved")) or park.in_flight
    held = len(state.holders) - sum(1 for h in state.holders if h.meta.get("reserved"))
    return {
        "url": target.url,
        "prefix": target.prefix,
        "name": name,
        "kind": kind,
        "limit": limit,
        "held": held,
        "reserved": reserved,
        "level": level(held + reserved, limit),
        "waiting": len(state.waiters),
        "parked": park.parked,
        "oldest_parked_age": park.oldest_age,
        "paused_for": park.paused_for,
        "next_due_in": park.head_due_in,
        "override": str(override) if override else None,
        **_park(park),
        "holders": _holders(state, statement_ages(target.client, target.prefix, [state])),
        "waiters": [
            {
                "position": i + 1,
                "owner": w.owner,
                "task_id": task_id_of(w.owner, w.meta),
                "task": w.meta.get("task"),
                "host": w.meta.get("host"),
                "pid": w.meta.get("pid"),
            }
            for i, w in enumerate(state.waiters)
        ],
        "entries": [{"position": i + 1, **e} for i, e in enumerate(park.entries)],
        "promoted": [
            {**e, "overdue": e["deadline_in"] is not None and e["deadline_in"] < 0}
            for e in park.promoted
        ],
        "count": count,
    }
