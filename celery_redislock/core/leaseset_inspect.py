"""Reading a lease set: :class:`Holder`, :class:`Waiter`, and what an acquisition stores.

Guaranteed: :func:`parse_inspect` turns one ``inspect.lua`` reply into the
holders and live waiters of one lease set as Redis saw them at one moment
(the script is atomic), with Redis time, each holder's fencing token, grant
time, remaining lease, ttl, limit and meta, and the waiters in arrival order.
Reading changes nothing in Redis.  A meta that is not a JSON object is kept
as ``{"raw": ...}`` rather than dropped.

:class:`LeaseSetInspection` is the part of :class:`~celery_redislock.core.leaseset.LeaseSet`
that reads (``holders()``, ``waiters()``) and builds the holder meta an
acquisition stores (``holder_meta()``); it holds no state of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .liveness import holder_fields
from .scripts import INSPECT, text

__all__ = ["Holder", "LeaseSetInspection", "Waiter", "parse_inspect"]


@dataclass(frozen=True)
class Holder:
    """One current holder, as Redis sees it."""

    owner: str
    token: int
    acquired_at: float  # Redis time, seconds since the epoch
    expires_in: float  # seconds
    ttl: float
    meta: dict[str, Any]
    #: the limit the holder acquired with (set on every holder read from Redis)
    limit: int | None = None
    #: that limit is fixed (a lock's): no run-time override applies to it
    fixed: bool = False


@dataclass(frozen=True)
class Waiter:
    """One queued waiter, in arrival order."""

    owner: str
    ttl: float
    meta: dict[str, Any]
    #: the limit the waiter asks with (set on every waiter read from Redis)
    limit: int | None = None
    #: that limit is fixed (a lock's): no run-time override applies to it
    fixed: bool = False


def parse_inspect(reply: Any) -> tuple[float, list[Holder], list[Waiter]]:
    """``inspect.lua``'s reply as (Redis time in seconds, holders, waiters)."""
    now_ms, raw_holders, raw_waiters = reply
    holders = []
    for i in range(0, len(raw_holders), 3):
        (token, acquired, ttl_ms), limit, meta = _split_entry(text(raw_holders[i + 2]), 3)
        holders.append(
            Holder(
                owner=text(raw_holders[i]),
                token=int(token),
                acquired_at=int(acquired) / 1000,
                expires_in=(float(raw_holders[i + 1]) - int(now_ms)) / 1000,
                ttl=int(ttl_ms) / 1000,
                meta=_parse_meta(meta),
                limit=abs(limit),
                fixed=limit < 0,
            )
        )
    waiters = []
    for i in range(0, len(raw_waiters), 2):
        (_, ttl_ms), limit, meta = _split_entry(text(raw_waiters[i + 1]), 2)
        waiters.append(
            Waiter(
                text(raw_waiters[i]),
                int(ttl_ms) / 1000,
                _parse_meta(meta),
                limit=abs(limit),
                fixed=limit < 0,
            )
        )
    return int(now_ms) / 1000, holders, waiters


def _split_entry(entry: str, fields: int) -> tuple[list[str], int, str]:
    """An info/qinfo entry as (its leading fields, limit, meta).

    Every entry is ``fields`` numeric fields, the limit, then the meta (which
    may contain ":"), separated by ":" (see ``lua/common.lua``).  The limit is
    stored as its caller passed it (negative when fixed) and returned so.
    ValueError if ``entry`` is not one (e.g. empty: the holder's info
    entry is missing).
    """
    *head, limit, meta = entry.split(":", fields + 1)
    if len(head) != fields:
        raise ValueError(f"not a lease-set entry with {fields} leading fields: {entry!r}")
    return head, int(limit), meta


def _parse_meta(raw: str) -> dict[str, Any]:
    try:
        meta = json.loads(raw) if raw else {}
    except ValueError:
        return {"raw": raw}
    return meta if isinstance(meta, dict) else {"raw": meta}


class LeaseSetInspection:
    """The reading part of a lease set: its holders and waiters, from Redis,
    and the holder meta an acquisition by this process stores."""

    # Set by LeaseSet.__init__.
    client: Any
    _script_keys: list[bytes]
    _meta_head: str

    def holder_meta(self) -> str:
        """The holder meta (JSON) an acquisition by this process stores: the
        ``meta`` given, ``host``, ``pid`` and ``proc`` (see liveness.holder_fields)."""
        return f"{self._meta_head}{holder_fields()}}}"

    def holders(self) -> list[Holder]:
        """Current unexpired holders, from Redis."""
        return parse_inspect(INSPECT(self.client, self._script_keys, []))[1]

    def waiters(self) -> list[Waiter]:
        """Live queued waiters in arrival order, from Redis."""
        return parse_inspect(INSPECT(self.client, self._script_keys, []))[2]
