"""One key as the operator's views show it (``status --top``, the web view,
the exporter's slot gauges): what it holds, reserves, queues and parks, and
the limit it runs by now.

The limit is the one the key runs by now, when it can be known: the park's
(a run-time override's, else the last one stored), else an override's
(never a lock's: a lock's limit is fixed), else the one the task class or
the holders and waiters state.  A rate key (no cap) shows none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..core.capacity import Capacity
from ..core.holders import Holder, Waiter
from ..core.inspection import LeaseSetState
from ..core.park import ParkStatus

__all__ = ["KeyRow", "key_row", "kind_and_limit", "rank"]


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
        key=lambda r: (
            -r.parked,
            -(r.held + r.reserved),
            -r.waiting,
            -(r.oldest_parked_age or 0.0),
            r.name,
        ),
    )


def key_row(
    name: str, state: LeaseSetState | None, park: ParkStatus | None, override: int | None
) -> KeyRow:
    holders = state.holders if state else ()
    entries: list[Holder | Waiter] = [*holders, *(state.waiters if state else ())]
    reserved = sum(1 for h in holders if h.meta.get("reserved"))
    kind, limit = kind_and_limit(entries, park, override, state.limit if state else None)
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


def kind_and_limit(
    entries: Sequence[Holder | Waiter],
    park: ParkStatus | None,
    override: int | None,
    resolved: int | None,
) -> tuple[str, int | None]:
    """What a key is (``lock``, ``semaphore``, ``rate``, ``-`` when nothing
    says) and the limit in force (None: no cap), from its stored entries
    (their :attr:`~celery_redislock.core.holders.Holder.capacity`), its park,
    its run-time override and the limit its holders resolved."""
    stored = [e.capacity for e in entries if e.capacity is not None]
    if any(c.kind == "lock" for c in stored):
        return "lock", 1
    raw = (park.limit if park else None) or override or resolved
    if raw is None and stored:
        raw = max(c.slots for c in stored)
    if raw is not None:
        capacity = Capacity.decoded(raw)
        if capacity.kind == "rate" or entries:
            return capacity.kind, capacity.limit
    return ("rate" if park and park.rate else "-"), raw
