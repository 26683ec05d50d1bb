"""``keep_latest``: while a run holds the key, the newest call waits as the key's
one pending run and replaces the call that waited before it.

Built on the park (docs/park.md): a contended call is stored in its key's park
as with ``park``, but a call that parks takes the place of the one parked
before it, in the same script call.  The replaced task ends ``SUPERSEDED``
(``AsyncResult.info["superseded_by"]``: the id of the call that took its
place), with a log line and ``lock_dropped(reason="superseded")``.  So a key
has at most its running runs and one pending run, and the pending one has the
newest arguments.

With ``lock_debounce=S`` every call parks, even on a free key, and is
promoted no sooner than S seconds after the newest call of its key, and (with
``lock_debounce_max=M``) no later than M seconds after the first call of the
burst, once a slot is free: calls within S of each other coalesce into one
run with the last call's arguments.

Guaranteed: every call is followed by a run of its key that *started after
the call was made* (its own, or a newer call's that took its place), unless
that newer call is revoked or expires.  A promoted run (its message already
published) is not replaced: a newer call parks behind it.  Under eager
execution there is no park: every call runs, one after the other (``wait``),
debounced or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .park import Park

__all__ = ["KeepLatest"]


class KeepLatest(Park):
    """Parks a contended task as its key's single pending run (see the module docstring)."""

    name = "keep_latest"

    def park_settings(self, task: Any) -> Mapping[str, Any]:
        return {"keep_latest": True, "debounce": float(task.lock_debounce or 0),
                "debounce_max": float(task.lock_debounce_max or 0),
                "supersede": bool(task.lock_supersede)}  # fmt: skip
