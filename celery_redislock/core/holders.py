"""What Redis says about a lease set: its :class:`Holder` and :class:`Waiter` entries.

Guaranteed: :func:`parse_inspect` turns one ``inspect.lua`` reply into the
holders and live waiters of one lease set as Redis saw them at one moment
(the script is atomic), with Redis time, each holder's fencing token, grant
time, remaining lease, ttl, limit and meta, and the waiters in arrival order.
Reading changes nothing in Redis.  A meta that is not a JSON object is kept
as ``{"raw": ...}`` rather than dropped.

Read by :meth:`LeaseSet.holders() <celery_redislock.core.leaseset.LeaseSet.holders>`,
``waiters()``, the CLI and the web view.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .capacity import Capacity
from .scripts import text

__all__ = ["Holder", "Waiter", "parse_inspect"]


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

    @property
    def capacity(self) -> Capacity | None:
        """The kind and slots the entry was stored with, None if unknown."""
        return _stored(self.limit, self.fixed)


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

    @property
    def capacity(self) -> Capacity | None:
        """The kind and slots the entry was stored with, None if unknown."""
        return _stored(self.limit, self.fixed)


def _stored(limit: int | None, fixed: bool) -> Capacity | None:
    """The capacity of an entry read from Redis (a lock, a semaphore, a rate
    with no cap): its limit as stored is negative when fixed."""
    if not limit:
        return None
    return Capacity.decoded(-limit if fixed else limit)


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
    may contain ":"), separated by ":" (see ``lua/includes/lease_set_keys.lua``).  The limit is
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
