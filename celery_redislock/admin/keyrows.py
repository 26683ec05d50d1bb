"""One key as the operator's views show it (``status --top``, the web view,
the exporter's slot gauges): what it holds, reserves, queues and parks, and
the limit it runs by now.

The limit is the one the key runs by now, when it can be known: the park's
(a run-time override's, else the last one stored), else an override's
(never a lock's: a lock's limit is fixed), else the one the task class or
the holders and waiters state.  A rate key (no cap) shows none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..core.holders import Holder, Waiter
from ..core.inspection import LeaseSetState
from ..core.park import ParkStatus
from ..task import UNCAPPED

__all__ = ["KeyRow", "key_row", "rank"]


@dataclass(frozen=True)
class KeyRow:
    """One key of ``status --top`` (ages and times in seconds)."""

    name: str
    kind: str  #: "lock", "semaphore", "rate" or "-" (not known)
    held: int  #: running holders (park reservations not counted)
    reserved: int  #: slots reserved for promoted tasks on their way
    limit: int | None  #: the slots of the key now, when known (None for a rate key)
    waiting: int  #: FIFO waiters (policy wait)
    parked: int
    oldest_parked_age: float | None
    paused_for: float  #: pause left (0: not paused)
    next_due_in: float  #: until the head of the park is due (0: now, or nothing parked)


def rank(rows: Iterable[KeyRow]) -> list[KeyRow]:
    """Busiest first: (parked, held + reserved, waiting, oldest parked age),
    each descending, then the name."""
    return sorted(
        rows,
        key=lambda r: (-r.parked, -(r.held + r.reserved), -r.waiting,
                       -(r.oldest_parked_age or 0.0), r.name),
    )  # fmt: skip


def key_row(
    name: str, state: LeaseSetState | None, park: ParkStatus | None, override: int | None
) -> KeyRow:
    holders = state.holders if state else ()
    entries: list[Holder | Waiter] = [*holders, *(state.waiters if state else ())]
    reserved = sum(1 for h in holders if h.meta.get("reserved"))
    fixed = any(e.fixed for e in entries)
    stored = max((e.limit for e in entries if e.limit), default=None)
    limit = park.limit if park else None
    if limit is None and not fixed:
        limit = override
    if limit is None:
        limit = (state.limit if state else None) or stored
    if limit is not None and limit >= UNCAPPED:
        kind, limit = "rate", None
    elif fixed:
        kind = "lock"
    elif entries:
        kind = "semaphore"
    else:
        kind = "rate" if park and park.rate else "-"
    return KeyRow(
        name=name,
        kind=kind,
        held=len(holders) - reserved,
        reserved=reserved if state else (park.in_flight if park else 0),
        limit=limit,
        waiting=len(state.waiters) if state else 0,
        parked=park.parked if park else 0,
        oldest_parked_age=park.oldest_age if park else None,
        paused_for=park.paused_for if park else 0.0,
        next_due_in=park.head_due_in if park else 0.0,
    )
