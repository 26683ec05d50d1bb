"""Enqueue-time de-duplication: at most one queued-or-running message per key.

The marker ``<prefix>:{<name>}:enqueued:<task name>`` holds the task id of
the message that claimed it.  It is per task name: two tasks whose keys give
the same name (``send_invoice`` and ``send_receipt``, both ``"{a}:{b}"``)
never take each other's call for a duplicate, as in celery-once and
celery-singleton, whose keys hold the task name too.  (Their run-time lock
is shared: one name, one lock.)  It is claimed in ``apply_async`` (one ``dedupe_claim.lua`` call)
and the message carries the header ``redislock_dedupe`` saying so; retries and
requeues of the same task id keep it; it is cleared (only by that task id)
when the task finishes, is skipped, fails, is revoked or expires before
running, or is cleaned up by the worker's main process after a crash.
Whatever else happens (message purged, worker and main process gone) it
expires after its TTL: ``lock_dedupe_ttl`` plus any ``countdown`` / ``eta``.

Guaranteed: while a marker lives, ``apply_async`` of the same key does not
publish.  Not guaranteed: tasks sent without ``apply_async`` (``send_task``,
beat with a task name) skip this check; the run-time lock still holds for
them.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from typing import Any

from celery.utils.time import maybe_iso8601
from redis.exceptions import RedisError

from .. import signals
from ..core.keys import LeaseKeys
from ..core.scripts import DEDUPE_CLAIM, DEDUPE_CLEAR, text
from ..settings import client_for
from .options import HEADER_DEDUPE as HEADER
from .options import header

__all__ = [
    "HEADER",
    "before_publish",
    "claim",
    "claim_for_call",
    "claim_window",
    "clear",
    "clear_for",
    "marker_key",
    "marker_ttl",
    "wanted",
]

log = logging.getLogger("celery_redislock")


def marker_key(prefix: str, name: str, task_name: str) -> str:
    return LeaseKeys(prefix, name).dedupe_marker(task_name)


def marker_ttl(dedupe_ttl: float, options: Mapping[str, Any]) -> float:
    """How long the marker of a message sent with ``options`` lives.

    ``dedupe_ttl`` counted from when the message becomes due, so a delayed
    message keeps its key for its whole delay.  An ``eta`` may be a
    datetime or an ISO 8601 string (read as Celery reads it); a naive one
    is UTC, as Celery's worker reads it, whatever the host's or the app's
    timezone.
    """
    countdown, eta = options.get("countdown"), options.get("eta")
    delay = 0.0
    if isinstance(countdown, (int, float)) and countdown > 0:
        delay = float(countdown)
    elif isinstance(eta, (datetime.datetime, str)):
        try:
            due = maybe_iso8601(eta) if isinstance(eta, str) else eta
        except ValueError:
            return dedupe_ttl  # not a time the worker can read either
        if due.tzinfo is None:
            due = due.replace(tzinfo=datetime.timezone.utc)
        now = datetime.datetime.now(datetime.timezone.utc)
        delay = max(0.0, (due - now).total_seconds())
    return dedupe_ttl + delay


def claim(
    client: Any, prefix: str, name: str, task_name: str, task_id: str, ttl: float
) -> str | None:
    """Claim the marker of ``task_name`` for ``task_id``: None if claimed, else
    the holder's task id."""
    key = marker_key(prefix, name, task_name)
    ok, holder = DEDUPE_CLAIM(client, [key], [task_id, int(ttl * 1000)])
    return None if int(ok) else text(holder)


def clear(client: Any, prefix: str, name: str, task_name: str, task_id: str) -> bool:
    """Delete the marker of ``task_name`` if ``task_id`` holds it."""
    return bool(DEDUPE_CLEAR(client, [marker_key(prefix, name, task_name)], [task_id]))


def claim_for_call(task: Any, name: str, task_id: str, options: Mapping[str, Any]) -> str | None:
    """Claim ``name``'s marker for a message ``task`` is about to publish.

    None if claimed; else the task id of the message that holds it, after a
    log line and a ``lock_contended(policy="dedupe")`` signal.
    """
    client, settings = client_for(task.app)
    ttl = marker_ttl(task.lock_dedupe_ttl, options)
    holder = claim(client, settings.prefix, name, task.name, task_id, ttl)
    if holder is not None:
        log.info(
            "%s: not enqueued, %r already has message %s queued or running (dedupe)",
            task.name,
            name,
            holder,
        )
        signals.lock_contended.send(
            sender=task,
            task_id=task_id,
            name=name,
            kind=task._redislock_kind,
            policy="dedupe",
            refused_by=None,
        )
    return holder


def claim_window(task: Any, name: str, task_id: str) -> str | None:
    """``lock_throttle`` without trailing: claim ``name``'s window (its marker
    lives ``lock_throttle`` seconds and is never cleared) for a message about
    to be published.  None if claimed; else the task id of the message that
    opened the window, after a log line and ``lock_contended(policy="throttle")``."""
    client, settings = client_for(task.app)
    key = LeaseKeys(settings.prefix, name).throttle_marker(task.name)
    ok, holder = DEDUPE_CLAIM(client, [key], [task_id, int(task.lock_throttle * 1000)])
    if int(ok):
        return None
    log.info(
        "%s: not enqueued, %r started %s less than %g s ago (throttle); its result is returned",
        task.name,
        name,
        text(holder),
        task.lock_throttle,
    )
    signals.lock_contended.send(
        sender=task,
        task_id=task_id,
        name=name,
        kind=task._redislock_kind,
        policy="throttle",
        refused_by=None,
    )
    return text(holder)


def clear_for(task: Any, task_id: str, args: Any, kwargs: Any) -> bool:
    """Delete the marker of this call's key if ``task_id`` holds it (never raises)."""
    try:
        name = task.redislock_name(args, kwargs)
        client, settings = client_for(task.app)
        return clear(client, settings.prefix, name, task.name, task_id)
    except (TypeError, ValueError):
        return False  # no key for these arguments: no marker was claimed
    except RedisError as exc:
        log.error("could not clear the dedupe marker of %s (%r); it expires", task_id, exc)
        return False


def wanted(task: Any, task_id: str | None, headers: Mapping[str, Any]) -> bool:
    """Whether a publish of ``task`` de-duplicates: the call's ``lock_dedupe``,
    else the class's; never a retry or requeue of the running task (it keeps
    the marker it holds, see :func:`before_publish`)."""
    request = task.request
    if not request.called_directly and task_id == request.id:
        return False
    return bool(headers.get(HEADER, task.lock_dedupe))


def before_publish(
    task: Any, name: str, task_id: str, headers: dict[str, Any], call: Mapping[str, Any]
) -> tuple[str, bool, str | None]:
    """What de-duplication does to a message ``task.apply_async`` is about to send.

    Returns ``(task_id, claimed, holder)``: the task id to publish with (one
    is made when a marker is claimed), whether this call claimed the marker
    (so it must give it back if publishing fails), and the task id of the
    message that already holds the key (then nothing must be published).
    ``headers`` gets :data:`HEADER` when the message owns a marker.  A retry
    or requeue of the running task keeps the marker it holds.
    """
    wanted = bool(headers.pop(HEADER, task.lock_dedupe))
    request = task.request
    if not request.called_directly and task_id == request.id:
        if header(request, HEADER):
            headers[HEADER] = 1
        return task_id, False, None
    if not wanted:
        return task_id, False, None
    holder = claim_for_call(task, name, task_id, call)
    if holder is not None:
        return task_id, False, holder
    headers[HEADER] = 1
    return task_id, True, None
