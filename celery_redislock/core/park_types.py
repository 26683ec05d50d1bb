"""The values the park takes and gives back: its settings (:class:`ParkConfig`),
an admission's decision (:class:`Outcome`), promotions, drops and a name's
status.  Plain data, parsed from the park scripts' replies (core/park.py)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .rate import Rate
from .scripts import text

__all__ = [
    "Dropped",
    "Outcome",
    "ParkConfig",
    "ParkStatus",
    "Promotion",
    "PromotionKind",
    "Verdict",
]


@dataclass(frozen=True)
class ParkConfig:
    """The bounds and timings of parking (the ``redislock_park_*`` settings)."""

    deadline: float = 60.0  #: seconds a reservation waits for its message
    max_parked: int = 0  #: per name; 0: no bound
    sweep_interval: float = 1.0  #: seconds between two sweeps of a worker
    max_total: int = 0  #: over all names (single server only); 0: no bound
    max_publishes: int = 10  #: publishes with a token before a task is given up
    #: one parked task per name, the newest: a task that parks takes out the one
    #: parked before it (``lock_policy="keep_latest"``; the bounds never refuse it)
    keep_latest: bool = False
    #: with ``keep_latest``: every call parks, promoted no sooner than this many
    #: seconds after the newest call (0: no debounce; ``lock_debounce``)
    debounce: float = 0.0
    #: and no later than this many seconds after the burst's first call, a slot
    #: free (0: no bound; ``lock_debounce_max``)
    debounce_max: float = 0.0
    #: with ``keep_latest``: a task that parks marks the name's current holders
    #: superseded (``lock_supersede``)
    supersede: bool = False


class Verdict(enum.Enum):
    """What an admission decided."""

    #: the slot is the caller's lease (``token``: fencing token); ``wait``: seconds
    #: its body waits before it starts, so starts keep the key's rate (see
    #: ``start_delay()`` in includes/start_delay.lua; milliseconds, at most 0.25 s)
    HELD = "held"
    RESERVED = "reserved"  #: a slot is reserved; publish with ``token``
    PARKED = "parked"  #: stored in the park (``count``: parked now; 0 at claim;
    #: ``wait`` > 0: a slot was free, its rate or a pause admits it in ``wait`` s)
    DUPLICATE = "dup"  #: already parked or in flight (``reason``: which)
    BOUNDED = "bounded"  #: the name's park is full (``count``); nothing stored
    BOUNDED_TOTAL = "bounded_total"  #: all names together are (``count``)
    DROP = "drop"  #: a copy that must not run (``reason``: stale / claimed / unknown)
    #: :meth:`Parking.claim` / :meth:`Parking.arrive` only: the task's revoke
    #: record exists (nothing taken; the caller drops the task)
    REVOKED = "revoked"
    #: :meth:`Parking.park_at_head` with a ``fence`` only: a call parked
    #: already takes the place of this one (``reason``: its id); not parked
    SUPERSEDED = "superseded"
    FULL = "full"  #: :meth:`Parking.try_hold` only: no slot free
    RATE = "rate"  #: :meth:`Parking.try_hold` only: the rate admits it in ``wait`` seconds


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    token: int = 0
    count: int = 0
    reason: str = ""
    wait: float = 0.0
    #: PARKED by a keep-latest call, or a keep-latest run back at the head:
    #: the tasks it took out of the park
    replaced: tuple[str, ...] = ()
    #: PARKED by a call (enqueue, arrival): the holder of the task's state
    #: guard, taken in the same script for the write of ``PARKED``
    #: (parking/states.py); "" when another write held it
    guard: str = ""

    @classmethod
    def of(cls, reply: Sequence[Any]) -> Outcome:
        verdict, value = Verdict(text(reply[0])), reply[1]
        if verdict is Verdict.HELD:
            return cls(verdict, token=int(value), wait=int(reply[2]) / 1_000_000)
        if verdict is Verdict.RESERVED:
            return cls(verdict, token=int(value))
        if verdict in (Verdict.DUPLICATE, Verdict.DROP, Verdict.SUPERSEDED):
            return cls(verdict, reason=text(value))
        if verdict is Verdict.RATE:
            return cls(verdict, wait=int(value) / 1000)
        if verdict is Verdict.PARKED and len(reply) == 6:  # a call parked: park_call.lua
            return cls(
                verdict,
                count=int(value),
                wait=int(reply[2]) / 1000,
                replaced=tuple(text(t) for t in reply[3]),
                guard=text(reply[4]),
            )
        if verdict is Verdict.PARKED and len(reply) == 5:  # back at the head: the pause's wait
            return cls(
                verdict,
                count=int(value),
                wait=int(reply[2]) / 1000,
                replaced=tuple(text(t) for t in reply[3]),
            )
        return cls(verdict, count=int(value))


class PromotionKind(enum.Enum):
    PUBLISH = "p"  #: publish the envelope with ``token``
    #: publish it again: its last publish was not claimed within the deadline
    REPUBLISH = "r"
    EXPIRED = "x"  #: expired while parked: never runs
    UNCLAIMED = "u"  #: published ``token`` times, never started: given up


@dataclass(frozen=True)
class Promotion:
    kind: PromotionKind
    task_id: str
    token: int  #: for UNCLAIMED: how often it was published
    envelope: str
    #: PUBLISH, the first task of a reply: the holder of the task's state
    #: guard, taken in the promoting script for the write of ``PROMOTED``
    #: (parking/states.py), which its caller makes at once; "" when another
    #: write held it, for the other tasks of the reply (each written later,
    #: so each write checks that its task is still in flight) and the other kinds
    guard: str = ""


@dataclass(frozen=True)
class Dropped:
    """What :meth:`Parking.drop` removed: ``where`` is ``"parked"``,
    ``"inflight"`` (a reservation: its slot passes on) or ``""`` (nothing)."""

    where: str
    envelope: str


@dataclass
class ParkStatus:
    """One name's parked work, as Redis sees it."""

    name: str
    parked: int
    oldest_age: float | None  #: seconds since the oldest parked task was enqueued
    in_flight: int  #: reservations published, not yet arrived
    overdue: int  #: of those, past their deadline (the sweeper re-publishes them)
    entries: list[dict[str, Any]] = field(default_factory=list)
    #: promotions in flight (published, not yet started), when entries were asked for
    promoted: list[dict[str, Any]] = field(default_factory=list)
    paused_for: float = 0.0  #: seconds of pause left (0: not paused)
    #: seconds until the head of the park is due by its rate and the pause (0: now)
    head_due_in: float = 0.0
    #: the rate the head is admitted by (a run-time override's, else its own), or None
    rate: Rate | None = None
    burst: int = 1
    #: the name's limit now (a run-time override's, else the last caller's), or None
    limit: int | None = None
    #: the listed limit (``limits=``) its parked work is held for, while it is, or None
    waits_for: str | None = None
