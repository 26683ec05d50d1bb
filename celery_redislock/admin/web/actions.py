"""The live web view's actions: release a holder, discard parked tasks,
pause and resume a key.

Each is what the matching command does (``release --owner``,
``discard-parked``, ``pause``, ``resume``), on one key, with its arguments
checked first; a bad request is an :class:`ActionError` (HTTP 400, or 409
when the holder is already gone), and nothing changes.  Whether an action
may run at all (``--allow-actions``, the token) is the server's check.
"""

from __future__ import annotations

import math
from typing import Any

from ... import parking
from ...core.inspection import force_release
from ...core.keys import validate_name
from ...core.park import wake
from ...core.rate import RateLimiter
from ..target import Target

__all__ = ["ACTIONS", "MAX_PAUSE", "ActionError", "perform"]

#: the longest pause the page may set, in seconds (a day)
MAX_PAUSE = 86400.0
ACTIONS = ("release", "discard", "pause", "resume")


class ActionError(Exception):
    """A refused action: ``status`` is the HTTP status, the message one line."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _name(body: dict[str, Any]) -> str:
    try:
        return validate_name(body.get("name"))
    except (TypeError, ValueError) as exc:
        raise ActionError(f"bad name: {exc}") from None


def _text(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise ActionError(f"{field} must be a non-empty string")
    return value


def perform(target: Target, action: str, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Run ``action`` with ``body`` (a JSON object); returns the JSON reply
    and what it did, in words, for the log."""
    name = _name(body)
    client, prefix = target.client, target.prefix
    if action == "release":
        owner = _text(body, "owner")
        try:
            released = force_release(client, prefix, name, [owner])
        except KeyError:
            raise ActionError(f"not a current holder of {name!r}: {owner!r}", 409) from None
        tokens = [h.token for h in released]
        return {"released": tokens}, f"released {name!r} owner {owner!r} (tokens {tokens})"
    if action == "discard":
        ids = body.get("task_ids") or []
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise ActionError("task_ids must be a list of task ids (empty: every parked task)")
        removed = parking.discard(client, prefix, name, ids, app=target.app)
        which = f"tasks {ids!r}" if ids else "all parked tasks"
        return {"discarded": removed}, f"discarded {removed} of {name!r} ({which})"
    if action == "pause":
        seconds = body.get("seconds")
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or not 0 < seconds <= MAX_PAUSE
        ):
            raise ActionError(f"seconds must be a number in (0, {MAX_PAUSE:g}]")
        left = RateLimiter(client, name, prefix=prefix).pause(float(seconds))
        return {"paused_for": left}, f"paused {name!r} for {left:g} s"
    if action == "resume":
        limiter = RateLimiter(client, name, prefix=prefix)
        left = limiter.paused_for()
        limiter.resume()
        wake(client, prefix, name)  # its parked work goes on now
        return {"resumed": True}, f"resumed {name!r} ({left:g} s of pause were left)"
    raise ActionError(f"unknown action {action!r} (one of {', '.join(ACTIONS)})", 404)
