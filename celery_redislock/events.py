"""What Flower, ``celery events`` and event-based exporters see of the library's
calls: Celery task events, sent with Celery's own dispatcher.

Every state the library writes to the result backend (``parking/states.py``,
``policies/skip.py``) is also sent as the event ``task-<state>`` with the
task's name (``task-parked``, ``task-promoted``, ``task-superseded``,
``task-skipped``), which Celery's event state machine
(``celery.events.state``, what Flower and the exporters build on) turns into
that state; a parked task that never runs is ``task-revoked`` with its name
(``expired`` set when it expired).  A call parked at enqueue, which Celery
never publishes, gets the ``task-sent`` Celery would have sent, and so does
each promotion's publish.

Sent only where the user enabled events, by Celery's own settings:

* ``task-sent``: where ``task_send_sent_event`` is set (as Celery's own);
* every other event, in a worker: when it sends task events (``-E`` or
  ``worker_send_task_events``; read at ``worker_init``, so pool children
  know it too; ``celery control enable_events`` at run time is not seen);
  in any other process (a caller, the CLI): when ``task_send_sent_event``
  is set.

Not guaranteed: delivery.  As Celery's own events, they are fire-and-forget
messages on the broker; a failure to send one is logged at DEBUG and never
fails the call.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Mapping
from typing import Any

__all__ = ["enabled", "in_worker", "send", "sent", "sent_fields"]

log = logging.getLogger("celery_redislock")

#: whether this process is a worker's (or one of its pool children) that sends
#: task events; None: not a worker (set by worker/lifecycle.py at ``worker_init``)
_WORKER_EVENTS: bool | None = None
_HOSTNAME: str | None = None  #: the worker's node name, for the events' ``hostname``
#: the node name of the events a process that is not a worker sends (a caller
#: that parks or supersedes, the CLI): Celery's state machine files every task
#: event but ``task-sent`` under a worker of that name, so one name for all
#: callers of a host, not one per process
_CALLER = f"celery-redislock@{socket.gethostname()}"


def in_worker(task_events: bool, hostname: str | None) -> None:
    """Record, at ``worker_init``, whether this worker sends task events."""
    global _WORKER_EVENTS, _HOSTNAME
    _WORKER_EVENTS, _HOSTNAME = bool(task_events), hostname


def enabled(app: Any) -> bool:
    """Whether this process sends the library's task events for ``app``."""
    if _WORKER_EVENTS is not None:
        return _WORKER_EVENTS
    return bool(app.conf.task_send_sent_event)


def send(app: Any, type_: str, task_id: str, **fields: Any) -> None:
    """Send ``type_`` (``task-parked``...) for ``task_id`` if :func:`enabled`;
    a field that is None or empty (a name not known here) is left out, so it
    never erases what the monitor knows."""
    if enabled(app):
        known = {k: v for k, v in fields.items() if v is not None and v != ""}
        _publish(app, type_, {"uuid": task_id, **known})


def sent(app: Any, fields: Mapping[str, Any]) -> None:
    """Send ``task-sent`` with ``fields`` if ``task_send_sent_event`` is set."""
    if app.conf.task_send_sent_event:
        _publish(app, "task-sent", dict(fields))


def sent_fields(
    headers: Mapping[str, Any], exchange: str, routing_key: str, queue: str | None
) -> dict[str, Any]:
    """The fields Celery puts in ``task-sent``, from a message's headers
    (protocol 2) and where it is published."""
    return {
        "uuid": headers.get("id"),
        "root_id": headers.get("root_id"),
        "parent_id": headers.get("parent_id"),
        "name": headers.get("task"),
        "args": headers.get("argsrepr"),
        "kwargs": headers.get("kwargsrepr"),
        "retries": headers.get("retries") or 0,
        "eta": headers.get("eta"),
        "expires": headers.get("expires"),
        "queue": queue or routing_key,
        "exchange": exchange,
        "routing_key": routing_key,
    }


def _publish(app: Any, type_: str, fields: dict[str, Any]) -> None:
    try:
        hostname = _HOSTNAME if _WORKER_EVENTS is not None else _CALLER
        with app.events.default_dispatcher(hostname=hostname) as dispatcher:
            dispatcher.send(
                type_, retry=True, retry_policy=app.conf.task_publish_retry_policy, **fields
            )
    except Exception as exc:  # monitoring never fails a call
        with contextlib.suppress(Exception):
            log.debug("could not send %s for %s: %r", type_, fields.get("uuid"), exc)
