"""Operators' calls on parked work (the CLI and user code): revoke, discard, status.

Each ends every task it removes in a final state (``REVOKED`` with its
reason) and passes a reservation's slot on; a removed promotion whose
message is still in the broker leaves a revoke record, so it never runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.park import Parking, ParkStatus, indexed_names
from ..enqueue import dedupe
from ..settings import client_for
from .message import json_loads
from .promotion import never_runs, promote
from .states import mark_revoked

__all__ = ["discard", "revoke", "status"]


def revoke(app: Any, task_id: str, name: str | None = None) -> str:
    """Revoke a parked task: ``app.control.revoke`` for the workers, plus a
    revoke record in Redis that promotion honours (workers forget revoked ids).

    With ``name`` the task is removed at once ("parked" / "inflight" / "").
    Without it, it stays in the park until promotion meets and drops it.
    Either way its state becomes REVOKED, and a reservation passes on.
    """
    client, settings = client_for(app)
    parking = Parking(client, settings.prefix, name or "")
    parking.record_revoke(task_id)
    app.control.revoke(task_id)
    if name is None:
        mark_revoked(app, task_id, "revoked")
        return ""
    dropped = parking.drop(task_id)
    if dropped.where == "inflight":
        promote(app, name, client=client, prefix=settings.prefix)
    envelope = json_loads(dropped.envelope) if dropped.where else None
    never_runs(app, parking, task_id, "revoked", envelope)
    return dropped.where


def discard(
    client: Any, prefix: str, name: str, task_ids: Sequence[str] = (), app: Any = None
) -> int:
    """Discard parked tasks of ``name`` (all parked ones and every promotion in
    flight when ``task_ids`` is empty); with ``app``, each is marked REVOKED in
    its result backend.  Returns how many were removed.  A discarded in-flight
    reservation passes its slot on at the next promotion (release or sweep),
    and its message, if it still arrives, finds no reservation and is dropped
    (a revoke record is left for it)."""
    parking = Parking(client, prefix, name)
    everything = parking.status(count=10**6)
    ids = list(task_ids) or [e["task_id"] for e in everything.entries + everything.promoted]
    removed = 0
    for task_id in ids:
        dropped = parking.drop(task_id)
        if not dropped.where:
            continue
        removed += 1
        if dropped.where == "inflight":  # its message is in the broker: it must not run
            parking.record_revoke(task_id)
        envelope = json_loads(dropped.envelope)
        if app is not None:
            never_runs(app, parking, task_id, "discarded", envelope)
        else:
            dedupe.clear(client, prefix, name, envelope.get("task") or "", task_id)
    return removed


def status(
    client: Any, prefix: str, names: Sequence[str] | None = None, count: int = 0
) -> list[ParkStatus]:
    """Parked counts per name (the index's names when ``names`` is None),
    with the first ``count`` parked entries of each."""
    if names is None:
        names = indexed_names(client, prefix)
    return [Parking(client, prefix, name).status(count) for name in names]
