"""Enqueue-time de-duplication: at most one queued-or-running message per key.

The marker ``<prefix>:{<name>}:enqueued`` holds the task id of the message
that claimed it.  It is claimed in ``apply_async`` (one ``dedupe.lua`` call),
re-claimed by retries and requeues of the same task id, and cleared (only by
that task id) when the task finishes, is skipped, fails, or is cleaned up by
the worker's main process after a crash.  Whatever else happens (message
purged, worker and main process gone) it expires after its TTL.

Guaranteed: while a marker lives, ``apply_async`` of the same key does not
publish.  Not guaranteed: tasks sent without ``apply_async`` (``send_task``,
beat with a task name) skip this check; the run-time lock still holds for
them.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from .keys import LeaseKeys
from .scripts import LuaScript

__all__ = ["DEDUPE", "claim", "clear", "marker_key"]

DEDUPE = LuaScript(
    "dedupe.lua",
    resources.files("celery_redislock").joinpath("lua").joinpath("dedupe.lua").read_text("utf-8"),
)


def marker_key(prefix: str, name: str) -> str:
    return f"{LeaseKeys(prefix, name).base}:enqueued"


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def claim(client: Any, prefix: str, name: str, task_id: str, ttl: float) -> str | None:
    """Claim the marker for ``task_id``: None if claimed, else the holder's task id."""
    ok, holder = DEDUPE(client, [marker_key(prefix, name)], ["claim", task_id, int(ttl * 1000)])
    return None if int(ok) else _text(holder)


def clear(client: Any, prefix: str, name: str, task_id: str) -> bool:
    """Delete the marker if ``task_id`` holds it."""
    return bool(DEDUPE(client, [marker_key(prefix, name)], ["clear", task_id, 0]))
