"""ALIVE: how long ago a holder's worker process last stated its holdings.

A worker process states what it holds (``core/liveness.py``) every ``ttl / 3``
while it holds anything, and its record expires ``ttl + 1`` s after its last
statement.  So for a holder whose meta says that its process states
(``"states": true``, written by worker processes):

* a statement is found: ALIVE is its age;
* none is found, and the lease is older than a record can outlive its last
  statement (``ttl + 1`` s, plus the :data:`~celery_redislock.core.liveness.STATEMENT_INTERVAL`
  before its first): the process stopped stating (it is stuck, say stopped
  or hung in a C call, or gone) more than ``ttl + 1`` s ago.  ALIVE is that
  bound, marked ``silent``: such a holder is a candidate for ``release``.

Holders whose process states nothing (outside a worker, park reservations,
holders written by an earlier version) have no ALIVE (``-``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core import liveness
from ..core.inspection import LeaseSetState

__all__ = ["Alive", "statement_ages"]


@dataclass(frozen=True)
class Alive:
    """Seconds since the holder's process last stated its holdings; ``silent``:
    it has no statement any more, and ``ago`` is the least the silence lasted."""

    ago: float
    silent: bool = False


def statement_ages(client: Any, prefix: str, states: Iterable[LeaseSetState]) -> dict[str, Alive]:
    """Per holder owner of ``states``: its ALIVE, for the holders that have one."""
    holders = [(s, h) for s in states for h in s.holders if isinstance(h.meta.get("proc"), str)]
    if not holders:
        return {}
    at = liveness.last_statements(client, prefix, {h.meta["proc"] for _, h in holders})
    ages: dict[str, Alive] = {}
    for s, h in holders:
        if h.meta["proc"] in at:
            ages[h.owner] = Alive(round(max(s.now - at[h.meta["proc"]], 0.0), 1))
        elif h.meta.get("states") is True:
            outlived = h.ttl + 1.0
            if s.now - h.acquired_at > outlived + liveness.STATEMENT_INTERVAL:
                ages[h.owner] = Alive(round(outlived, 1), silent=True)
    return ages
