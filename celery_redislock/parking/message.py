"""A task message as the park stores it, and its re-publishing.

The *envelope* is the message Celery built (at publish) or received (in the
pool child, for a task that arrived without a reservation): body, protocol
and custom headers, delivery properties, and where it was routed.  A
promotion re-sends it unchanged but for the token header and a cleared eta,
to the queue it was routed to through the anonymous exchange, so no routing
form (``queue=``, ``routing_key=``, ``exchange=``, ``task_routes``) can send
it elsewhere.  Stored as kombu's JSON (datetimes, UUIDs, bytes as Celery
sends them).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from kombu.common import Broadcast
from kombu.serialization import dumps as _kombu_dumps
from kombu.serialization import loads as _kombu_loads
from kombu.serialization import registry
from kombu.utils import json as _kombu_json

from .. import events
from ..enqueue.options import HEADER_PARK_TOKEN
from ..events import sent_fields

__all__ = [
    "copy_token",
    "envelope_of_publish",
    "envelope_of_request",
    "expires_in",
    "json_dumps",
    "json_loads",
    "republish",
    "request_of",
]

log = logging.getLogger("celery_redislock")


def json_dumps(value: Any) -> str:
    """kombu's JSON (datetimes, UUIDs, bytes as Celery sends them)."""
    return str(_kombu_json.dumps(value))  # type: ignore[no-untyped-call]


def json_loads(raw: str) -> Any:
    return _kombu_json.loads(raw)  # type: ignore[no-untyped-call]


def kombu_dumps(body: Any, serializer: str) -> tuple[str, str, str | bytes]:
    content_type, content_encoding, data = _kombu_dumps(body, serializer=serializer)  # type: ignore[no-untyped-call]
    return str(content_type), str(content_encoding), data


def expires_in(headers: Mapping[str, Any], app: Any) -> float:
    """Seconds until the message's ``expires`` header (0: never)."""
    expires = headers.get("expires")
    if not expires:
        return 0.0
    return max(_seconds_until(expires, app), 0.001)


def eta_in(headers: Mapping[str, Any], app: Any) -> float:
    """Seconds until the message's ``eta`` header (0: none, or past)."""
    eta = headers.get("eta")
    return max(_seconds_until(eta, app), 0.0) if eta else 0.0


def _seconds_until(when: Any, app: Any) -> float:
    from celery.utils.time import maybe_iso8601, maybe_make_aware

    return float((maybe_make_aware(maybe_iso8601(when)) - app.now()).total_seconds())


_CALL_OPTIONS = {
    "exchange",
    "routing_key",
    "queue",
    "event_dispatcher",
    "retry",
    "retry_policy",
    "serializer",
    "delivery_mode",
    "compression",
    "declare",
    "headers",
    "exchange_type",
    "timeout",
    "confirm_timeout",
}
_PROTOCOL_HEADERS = (
    "lang",
    "task",
    "id",
    "shadow",
    "eta",
    "expires",
    "group",
    "group_index",
    "retries",
    "timelimit",
    "root_id",
    "parent_id",
    "argsrepr",
    "kwargsrepr",
    "origin",
    "ignore_result",
    "replaced_task_nesting",
    "stamped_headers",
    "stamps",
    "compression",
)


def _destination(app: Any, options: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(exchange, routing key, queue to declare) that Celery's
    ``send_task_message`` publishes to with these options: its own rule
    (celery.app.amqp, 5.3 to 5.7), so a promotion re-sends where the original
    went, whatever routing form chose it (``queue=``, ``routing_key=``,
    ``exchange=``, ``task_routes``, per call).  Exchange ``""`` is the
    anonymous exchange: the routing key is the queue.  The queue to declare
    is the one Celery declared with the original publish (a queue of the
    app's, or named per call: ``app.amqp.queues`` has it or makes it), by
    name; None for a per-call ``Queue`` object (its declaration cannot be
    rebuilt by name: ``Queue`` equality ignores arguments such as
    ``max_priority``), a broadcast queue, or a call that passed its own
    ``declare=`` (``[]``: the caller may not declare)."""
    queue: Any = options.get("queue")
    exchange = options.get("exchange")
    routing_key, exchange_type = options.get("routing_key"), options.get("exchange_type")
    amqp = app.amqp
    qname = queue
    if queue is None and exchange is None:
        queue = amqp.default_queue
    if queue is not None:
        if isinstance(queue, str):
            qname, queue = queue, amqp.queues[queue]
        else:
            qname = queue.name
    declare = None
    if (
        options.get("declare") is None  # a per-call declare= (even []) is the caller's own
        and queue is not None
        and not isinstance(queue, Broadcast)
        and amqp.queues.get(qname) is queue
    ):
        declare = str(qname)
    if exchange_type is None:
        exchange_type = getattr(getattr(queue, "exchange", None), "type", None) or "direct"
    if (not exchange or not routing_key) and exchange_type == "direct":
        return "", str(qname), declare
    if exchange is None:
        exchange = queue.exchange.name or amqp.default_exchange
        routing_key = routing_key or queue.routing_key or app.conf.task_default_routing_key
    return str(getattr(exchange, "name", exchange) or ""), str(routing_key or ""), declare


def envelope_of_publish(app: Any, message: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """The message ``app.amqp.send_task_message`` is about to publish, as stored."""
    headers, properties, body, _ = message
    headers = {**headers, **(options.get("headers") or {})}
    serializer = options.get("serializer") or app.conf.task_serializer
    content_type, content_encoding, data = kombu_dumps(body, serializer=serializer)
    extra = {k: v for k, v in options.items() if k not in _CALL_OPTIONS}
    props = {**properties, **extra}
    exchange, routing_key, declare = _destination(app, options)
    return {
        "task": headers.get("task"),
        "headers": headers,
        "body": _b64(data),
        "content_type": content_type,
        "content_encoding": content_encoding,
        "compression": options.get("compression"),
        "properties": _publish_properties(props, options.get("delivery_mode")),
        "exchange": exchange,
        "routing_key": routing_key,
        "queue": routing_key if exchange == "" else None,
        "declare": declare,
    }


#: the field of a worker's request (``run/request.py`` ``LockRequest``) that
#: carries the content type of the message as it arrived, so a message parked
#: at arrival is stored in the serializer it was sent with (a per-call
#: ``serializer=`` may differ from the task's)
REQUEST_CONTENT_TYPE = "redislock_content_type"


def copy_token(token: object, pid: int) -> str:
    """The promotion token of a copy, or for a copy that has none (a
    ``send_task``, a countdown, a retry) its mark: the machine and the
    process ``pid`` that runs it.  A run that goes back to its park makes it
    stale (``park_head.lua`` ARGV[11]); the worker's main process, which
    knows the process when it dies (run/request.py), then reads that copy
    as given up in the park.  The machine's host name, not the worker's
    node name: a pool child of a worker started in code knows only the
    former."""
    return f"~{socket.gethostname()}:{pid}" if token is None else str(token)


def envelope_of_request(
    task: Any, request: Any, args: Sequence[Any], kwargs: Any
) -> dict[str, Any]:
    """The message a worker received, rebuilt from the request in the pool child.

    Body (args, kwargs, callbacks/errbacks/chain/chord), Celery's protocol
    headers and the custom headers, delivery properties, exchange and routing
    key as delivered.  The queue is the routing key when a queue of that name
    is known to the app and the message was delivered to it (through the
    anonymous exchange, or its own exchange and routing key).
    """
    headers = {k: getattr(request, k, None) for k in _PROTOCOL_HEADERS}
    headers["lang"] = headers["lang"] or "py"
    headers["task"] = task.name
    headers.update(request.headers or {})
    headers.pop(HEADER_PARK_TOKEN, None)
    headers.pop(REQUEST_CONTENT_TYPE, None)
    embed = {
        "callbacks": request.callbacks,
        "errbacks": request.errbacks,
        "chain": request.chain,
        "chord": request.chord,
    }
    sent_as = registry.type_to_name.get(getattr(request, REQUEST_CONTENT_TYPE, None) or "")
    content_type, content_encoding, data = kombu_dumps(
        (list(args), dict(kwargs), embed), serializer=sent_as or task.serializer
    )
    delivery = request.delivery_info or {}
    props = dict(request.properties or {})
    props["priority"] = delivery.get("priority", props.get("priority"))
    routing_key = delivery.get("routing_key") or ""
    exchange = delivery.get("exchange") or ""
    # The queue by the name of its routing key only when that is where the
    # message went: a topic exchange's key may name another queue as well.
    known = task.app.amqp.queues.get(routing_key) if routing_key else None
    direct = known is not None and (
        not exchange
        or (getattr(known.exchange, "name", None) == exchange and known.routing_key == routing_key)
    )
    queue = routing_key if direct else None
    return {
        "task": task.name,
        "headers": headers,
        "body": _b64(data),
        "content_type": content_type,
        "content_encoding": content_encoding,
        "compression": headers.get("compression"),
        "properties": _publish_properties(props, props.get("delivery_mode")),
        "exchange": exchange,
        "routing_key": routing_key,
        "queue": queue,
        "declare": queue,
    }


def _publish_properties(props: Mapping[str, Any], delivery_mode: Any) -> dict[str, Any]:
    out = {k: props.get(k) for k in ("correlation_id", "reply_to", "priority")}
    out["delivery_mode"] = delivery_mode or props.get("delivery_mode") or 2
    return {k: v for k, v in out.items() if v is not None}


def _b64(data: str | bytes) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def announce_sent(app: Any, envelope: Mapping[str, Any]) -> None:
    """The ``task-sent`` event of a stored message's publish, if
    ``task_send_sent_event`` is set (as Celery sends its own)."""
    if app.conf.task_send_sent_event:
        fields = sent_fields(
            envelope["headers"],
            envelope.get("exchange") or "",
            envelope.get("routing_key") or "",
            envelope.get("queue"),
        )
        events.sent(app, fields)


def republish(app: Any, envelope: Mapping[str, Any], token: int) -> None:
    """Publish a stored message again: same task id, the token in a header,
    no (past) eta, to the queue it was routed to through the anonymous
    exchange (which cannot drop it for want of a binding), declaring first
    the queue the original publish declared, as Celery did then (so a queue
    no worker has declared yet keeps the message, as it would have kept
    the original)."""
    headers = dict(envelope["headers"])
    headers[HEADER_PARK_TOKEN] = str(token)
    headers["eta"] = None
    queue = envelope.get("queue")
    exchange, routing_key = (
        ("", queue) if queue else (envelope["exchange"], envelope["routing_key"])
    )
    if "declare" in envelope:
        name = envelope["declare"]
    else:  # stored by a version that did not say: a queue the app knows
        name = queue if queue in app.amqp.queues else None
    declare = None
    if name:
        with contextlib.suppress(KeyError):  # task_create_missing_queues off
            declare = [app.amqp.queues[name]]
    with app.producer_or_acquire(None) as producer:
        producer.publish(
            base64.b64decode(envelope["body"]),
            exchange=exchange,
            routing_key=routing_key,
            headers=headers,
            content_type=envelope["content_type"],
            content_encoding=envelope["content_encoding"],
            compression=envelope.get("compression"),
            retry=True,
            retry_policy=app.conf.task_publish_retry_policy,
            declare=declare,
            **envelope["properties"],
        )


def request_of(envelope: Mapping[str, Any] | None) -> Any:
    """The task request (Celery's ``Context``) of a stored message, or None."""
    if not envelope:
        return None
    from celery.app.task import Context

    try:
        raw = base64.b64decode(envelope["body"])
        args, kwargs, embed = _kombu_loads(  # type: ignore[no-untyped-call]
            raw, envelope["content_type"], envelope["content_encoding"]
        )
        return Context(dict(envelope["headers"]), args=args, kwargs=kwargs, **(embed or {}))
    except Exception as exc:  # a state without the chord is still a final state
        log.warning("could not rebuild the request of parked %s (%r)", envelope.get("task"), exc)
        return None
