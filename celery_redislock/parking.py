"""The ``park`` contention policy: contended tasks wait in Redis, not in the broker.

See docs/park.md for the state machine.  In short, per lock name:

* **enqueue** (``apply_async``): one ``park_enqueue.lua`` call decides.  If the
  name is full (holders + reservations reach the limit) or anything is
  parked, the message Celery built is stored in the name's park list and not
  published (state ``PARKED``).  Otherwise a slot is *reserved* (a holder
  entry ``rsv.<task id>`` with a deadline) and the message is published with
  the reservation's promotion token in a header.
* **arrival** (worker): while its id is in flight, the first copy of a
  promoted message to arrive turns the reservation into its lease
  (``park_claim.lua``); a copy whose token is stale or already claimed is
  acked and dropped, one whose token Redis does not know (it lost its data)
  is admitted as new.  A message without a token (beat, ``send_task``, a
  countdown retry) goes through the same admission as at enqueue: it runs if
  a slot is free and nothing is parked, else it is parked by that same call
  and acked (``Ignore``).
* **promotion**: after a park-policy task releases, ``park_promote.lua``
  reserves every free slot for the parked tasks at the head of the list and
  the releasing process re-publishes their stored messages (anonymous
  exchange, the queue they were routed to).
* **sweeper**: a thread in every worker's main process asks Redis once per
  interval which names are due (``park_due.lua`` on the index of names with
  parked work) and runs the promotion for them: overdue reservations (lost
  publish, dead publisher) are re-published with a new token, and slots
  freed by dead holders or a raised limit are filled, all of them at once.

Guaranteed (single Redis): a parked task is published only with a
reservation, so at most ``limit`` tasks of a name are held, reserved or in
the broker through this path; a reservation lapses at its deadline and is
re-published; a copy with a stale token never runs.  Not guaranteed: parked
tasks survive the loss of the lock Redis (a warning at worker start says so
when it persists nothing); custom priorities within a name (the park list is
FIFO).
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery.exceptions import Ignore
from kombu.serialization import dumps as _kombu_dumps
from kombu.serialization import loads as _kombu_loads
from kombu.utils import json as _kombu_json
from redis.exceptions import RedisError

from . import dedupe, signals
from .core import liveness
from .core.errors import LockContended
from .core.heartbeat import is_cluster
from .core.keys import ParkKeys, park_index, revoke_record
from .core.leaseset import WAIT_LEASE, LeaseSet
from .core.owners import new_owner
from .core.scripts import (
    PARK_CLAIM,
    PARK_DROP,
    PARK_DUE,
    PARK_ENQUEUE,
    PARK_INSPECT,
    PARK_PROMOTE,
    PARK_RELEASE,
    text,
)
from .options import HEADER_PARK_TOKEN, header
from .settings import client_for

__all__ = [
    "HEADER_PARK_TOKEN",
    "PARKED",
    "PROMOTED",
    "ParkFull",
    "ParkStatus",
    "ParkUnclaimed",
    "Parking",
    "Sweeper",
    "discard",
    "park_settings",
    "promote",
    "revoke",
    "status",
]

log = logging.getLogger("celery_redislock")

PARKED = "PARKED"
#: published again by a promotion, not yet started (its message is in the broker)
PROMOTED = "PROMOTED"
PROMOTE_BATCH = 100
REVOKE_MEMORY = 7 * 24 * 3600  # seconds a revoke record of a parked task is kept


class StillPending(Ignore):  # type: ignore[misc]
    """A run ended without running the body, while the task itself is still to
    run: it was parked at arrival, or it was a copy of a task that is parked or
    in flight.  Its enqueue marker (``lock_dedupe``) stays: it is not done."""


class ParkFull(LockContended):
    """A park bound is reached: the name's (``redislock_park_max``) or the one over
    all names (``redislock_park_max_total``).  The task was not stored."""


class ParkUnclaimed(LockContended):
    """The final state (``FAILURE``) of a parked task that was published
    ``redislock_park_max_publishes`` times and no worker ever started it: no
    worker consumes the queue it is routed to, or none knows its task name.
    Its slot passed on; a copy still in the broker never runs."""


@dataclass(frozen=True)
class ParkSettings:
    deadline: float = 60.0  # seconds a reservation waits for its message
    max_parked: int = 0  # per name; 0: no bound
    sweep_interval: float = 1.0
    max_total: int = 0  # over all names; 0: no bound
    max_publishes: int = 10  # publishes with a token before a task is given up as unclaimed


def park_settings(app: Any) -> ParkSettings:
    """``redislock_park_deadline``, ``redislock_park_max``, ``redislock_park_max_total``,
    ``redislock_park_sweep_interval``, ``redislock_park_max_publishes``."""
    conf = app.conf
    deadline = conf.get("redislock_park_deadline", 60.0)
    max_parked = conf.get("redislock_park_max", 0) or 0
    max_total = conf.get("redislock_park_max_total", 0) or 0
    interval = conf.get("redislock_park_sweep_interval", 1.0)
    max_publishes = conf.get("redislock_park_max_publishes", 10)
    for what, value in (("redislock_park_deadline", deadline), ("sweep interval", interval)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
    counts = (("redislock_park_max", max_parked), ("redislock_park_max_total", max_total))
    for what, count in counts:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{what} must be an int >= 0, got {count!r}")
    if isinstance(max_publishes, bool) or not isinstance(max_publishes, int) or max_publishes < 1:
        raise ValueError(f"redislock_park_max_publishes must be an int >= 1, got {max_publishes!r}")
    return ParkSettings(float(deadline), max_parked, float(interval), max_total, max_publishes)


def json_dumps(value: Any) -> str:
    """kombu's JSON (datetimes, UUIDs, bytes as Celery sends them)."""
    return str(_kombu_json.dumps(value))  # type: ignore[no-untyped-call]


def json_loads(raw: str) -> Any:
    return _kombu_json.loads(raw)  # type: ignore[no-untyped-call]


def kombu_dumps(body: Any, serializer: str) -> tuple[str, str, str | bytes]:
    content_type, content_encoding, data = _kombu_dumps(body, serializer=serializer)  # type: ignore[no-untyped-call]
    return str(content_type), str(content_encoding), data


def _entry_field(value: str) -> str:
    """``value`` as a field of a park entry, whose fields are separated by ``|``."""
    return value.replace("|", "/")


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


#: kind ("p" publish, "x" expired, "u" unclaimed), task id, token (for "u": how
#: often it was published), envelope
Promotion = tuple[str, str, int, str]


def _promotions(items: Sequence[Any]) -> list[Promotion]:
    return [
        (text(items[i]), text(items[i + 1]), int(items[i + 2]), text(items[i + 3]))
        for i in range(0, len(items), 4)
    ]


@dataclass
class ParkStatus:
    """One name's parked work, as Redis sees it."""

    name: str
    parked: int
    oldest_age: float | None  # seconds since the oldest parked task was enqueued
    in_flight: int  # reservations published, not yet arrived
    overdue: int  # of those, past their deadline (the sweeper re-publishes them)
    entries: list[dict[str, Any]] = field(default_factory=list)
    #: promotions in flight (published, not yet started), when entries were asked for
    promoted: list[dict[str, Any]] = field(default_factory=list)


class Parking:
    """The park operations of one name: each is one Lua call."""

    def __init__(self, client: Any, prefix: str, name: str) -> None:
        self.client = client
        self.prefix = prefix
        self.name = name
        self.cluster = is_cluster(client)
        self.index = park_index(prefix)
        # On a cluster the index is in another slot: updated from the reply;
        # the total over all names cannot be kept there (see ParkSettings.max_total).
        self.keys = ParkKeys(prefix, name).park_script_keys(self.cluster)

    def _call(self, script: Any, args: list[Any]) -> Any:
        if self.cluster:
            # Registered first, so a crash after the call cannot leave parked
            # work out of the index; the reply's due time corrects the score.
            self.client.zadd(self.index, {self.name: 0}, nx=True)
        reply = script(self.client, self.keys, [self.name, *args])
        if self.cluster:
            due = int(reply[0] if script in (PARK_PROMOTE, PARK_RELEASE) else reply[-1])
            if due < 0:
                self.client.zrem(self.index, self.name)
            else:
                self.client.zadd(self.index, {self.name: due})
        return reply

    def admit(
        self,
        mode: str,
        task_id: str,
        limit: int,
        envelope: str,
        expires_in: float,
        deadline: float,
        max_parked: int,
        owner: str = "",
        ttl: float = 0.0,
        meta: str = "",
        max_total: int = 0,
        task_name: str = "",
    ) -> tuple[str, Any]:
        if max_total and self.cluster:
            raise ValueError(
                "redislock_park_max_total needs a single Redis server: on a cluster the "
                "total over all names spans slots (use redislock_park_max per name)"
            )
        reply = self._call(
            PARK_ENQUEUE,
            [mode, task_id, limit, envelope, _ms(expires_in) if expires_in > 0 else 0,
             _ms(deadline), max_parked, owner, _ms(ttl) if ttl else 0, meta, max_total,
             _entry_field(task_name)],
        )  # fmt: skip
        return text(reply[0]), reply[1]

    def claim(
        self,
        task_id: str,
        token: str,
        owner: str,
        ttl: float,
        meta: str,
        limit: int,
        task_name: str = "",
    ) -> tuple[str, Any]:
        reply = self._call(
            PARK_CLAIM, [task_id, token, owner, _ms(ttl), meta, limit, _entry_field(task_name)]
        )
        return text(reply[0]), reply[1]

    def promote(self, limit: int, park: ParkSettings, task_name: str = "") -> list[Promotion]:
        """Fill the free slots; ``limit`` and ``task_name`` are the caller's (0 and
        "" for the sweeper): parked tasks of that name are admitted by ``limit``,
        others by their own limit from when they were parked."""
        reply = self._call(
            PARK_PROMOTE,
            [limit, _ms(park.deadline), PROMOTE_BATCH, _entry_field(task_name), park.max_publishes],
        )
        return _promotions(reply[1:])

    def release(
        self, owner: str, limit: int, park: ParkSettings, task_name: str = ""
    ) -> tuple[bool, list[Promotion]]:
        """Release ``owner``'s slot (as ``release.lua``) and promote into the
        freed slots (as :meth:`promote`), in one call; returns whether it held,
        and the promotions."""
        reply = self._call(
            PARK_RELEASE,
            [owner, _ms(WAIT_LEASE), limit, _ms(park.deadline), PROMOTE_BATCH,
             _entry_field(task_name), park.max_publishes],
        )  # fmt: skip
        return bool(reply[1]), _promotions(reply[2:])

    def drop(self, task_id: str, token: str = "") -> tuple[str, str]:
        reply = self._call(PARK_DROP, [task_id, token])
        return text(reply[0]), text(reply[1])

    def status(self, count: int = 0) -> ParkStatus:
        now_ms, parked, oldest, inflight, overdue, listed, promoted = PARK_INSPECT(
            self.client, self.keys, [self.name, count]
        )
        now = int(now_ms)
        entries = [
            {**_listed(listed, i, now), "expires_in": _until(listed[i + 2], now)}
            for i in range(0, len(listed), 4)
        ]
        in_flight = [
            {**_listed(promoted, i, now), "deadline_in": _until(promoted[i + 2], now)}
            for i in range(0, len(promoted), 4)
        ]
        return ParkStatus(
            self.name,
            int(parked),
            (now - int(oldest)) / 1000 if int(oldest) else None,
            int(inflight),
            int(overdue),
            entries,
            in_flight,
        )


def _listed(items: Sequence[Any], i: int, now_ms: int) -> dict[str, Any]:
    """One listed entry of ``park_inspect.lua``: task id, enqueue time, envelope."""
    env = json_loads(text(items[i + 3]))
    return {
        "task_id": text(items[i]),
        "task": env.get("task"),
        "age": (now_ms - int(items[i + 1])) / 1000,
        "argsrepr": env.get("headers", {}).get("argsrepr"),
    }


def _until(ms: Any, now_ms: int) -> float | None:
    """Seconds from ``now_ms`` to the Redis time ``ms`` (None for 0: never)."""
    return (int(ms) - now_ms) / 1000 if int(ms) else None


# -- the stored message -----------------------------------------------------

_CALL_OPTIONS = {
    "exchange", "routing_key", "queue", "event_dispatcher", "retry", "retry_policy",
    "serializer", "delivery_mode", "compression", "declare", "headers", "exchange_type",
    "timeout", "confirm_timeout",
}  # fmt: skip
_PROTOCOL_HEADERS = (
    "lang", "task", "id", "shadow", "eta", "expires", "group", "group_index", "retries",
    "timelimit", "root_id", "parent_id", "argsrepr", "kwargsrepr", "origin", "ignore_result",
    "replaced_task_nesting", "stamped_headers", "stamps", "compression",
)  # fmt: skip


def _destination(app: Any, options: Mapping[str, Any]) -> tuple[str, str]:
    """(exchange, routing key) that Celery's ``send_task_message`` publishes to
    with these options: its own rule (celery.app.amqp, 5.3 to 5.7), so a
    promotion re-sends where the original went, whatever routing form chose it
    (``queue=``, ``routing_key=``, ``exchange=``, ``task_routes``, per call).
    Exchange ``""`` is the anonymous exchange: the routing key is the queue."""
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
    if exchange_type is None:
        exchange_type = getattr(getattr(queue, "exchange", None), "type", None) or "direct"
    if (not exchange or not routing_key) and exchange_type == "direct":
        return "", str(qname)
    if exchange is None:
        exchange = queue.exchange.name or amqp.default_exchange
        routing_key = routing_key or queue.routing_key or app.conf.task_default_routing_key
    return str(getattr(exchange, "name", exchange) or ""), str(routing_key or "")


def envelope_of_publish(app: Any, message: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """The message ``app.amqp.send_task_message`` is about to publish, as stored."""
    headers, properties, body, _ = message
    headers = {**headers, **(options.get("headers") or {})}
    serializer = options.get("serializer") or app.conf.task_serializer
    content_type, content_encoding, data = kombu_dumps(body, serializer=serializer)
    extra = {k: v for k, v in options.items() if k not in _CALL_OPTIONS}
    props = {**properties, **extra}
    exchange, routing_key = _destination(app, options)
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
    }


def envelope_of_request(
    task: Any, request: Any, args: Sequence[Any], kwargs: Any
) -> dict[str, Any]:
    """The message a worker received, rebuilt from the request in the pool child.

    Body (args, kwargs, callbacks/errbacks/chain/chord), Celery's protocol
    headers and the custom headers, delivery properties, exchange and routing
    key as delivered.  The queue is the routing key when a queue of that name
    is known to the app.
    """
    headers = {k: getattr(request, k, None) for k in _PROTOCOL_HEADERS}
    headers["lang"] = headers["lang"] or "py"
    headers["task"] = task.name
    headers.update(request.headers or {})
    headers.pop(HEADER_PARK_TOKEN, None)
    embed = {
        "callbacks": request.callbacks,
        "errbacks": request.errbacks,
        "chain": request.chain,
        "chord": request.chord,
    }
    content_type, content_encoding, data = kombu_dumps(
        (list(args), dict(kwargs), embed), serializer=task.serializer
    )
    delivery = request.delivery_info or {}
    props = dict(request.properties or {})
    props["priority"] = delivery.get("priority", props.get("priority"))
    routing_key = delivery.get("routing_key") or ""
    queue = routing_key if routing_key in task.app.amqp.queues else None
    return {
        "task": task.name,
        "headers": headers,
        "body": _b64(data),
        "content_type": content_type,
        "content_encoding": content_encoding,
        "compression": headers.get("compression"),
        "properties": _publish_properties(props, props.get("delivery_mode")),
        "exchange": delivery.get("exchange") or "",
        "routing_key": routing_key,
        "queue": queue,
    }


def _publish_properties(props: Mapping[str, Any], delivery_mode: Any) -> dict[str, Any]:
    out = {k: props.get(k) for k in ("correlation_id", "reply_to", "priority")}
    out["delivery_mode"] = delivery_mode or props.get("delivery_mode") or 2
    return {k: v for k, v in out.items() if v is not None}


def _b64(data: str | bytes) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def republish(app: Any, envelope: Mapping[str, Any], token: int) -> None:
    """Publish a stored message again: same task id, the token in a header,
    no (past) eta, to the queue it was routed to through the anonymous
    exchange (which cannot drop it for want of a binding)."""
    headers = dict(envelope["headers"])
    headers[HEADER_PARK_TOKEN] = str(token)
    headers["eta"] = None
    queue = envelope.get("queue")
    exchange, routing_key = (
        ("", queue) if queue else (envelope["exchange"], envelope["routing_key"])
    )
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
            **envelope["properties"],
        )


# -- enqueue ------------------------------------------------------------------


@dataclass
class _Call:
    task: Any
    name: str
    task_id: str
    limit: int
    outcome: str = ""


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("redislock_park", default=None)
_INSTALL_LOCK = threading.Lock()


def _install_sender(app: Any) -> None:
    """Wrap ``app.amqp.send_task_message`` once: a park call decides there,
    with the message exactly as Celery built it (routing done)."""
    amqp = app.amqp
    if getattr(amqp, "_redislock_park_sender", False):
        return
    with _INSTALL_LOCK:
        if getattr(amqp, "_redislock_park_sender", False):
            return
        original = amqp.send_task_message

        def send_task_message(producer: Any, name: str, message: Any, **options: Any) -> Any:
            call = _CALL.get()
            if call is None or message.headers.get("id") != call.task_id:
                return original(producer, name, message, **options)
            _CALL.set(None)  # only this one message (not callbacks it may publish)
            token = _enqueue(call, envelope_of_publish(app, message, options))
            if token is None:
                return None
            message.headers[HEADER_PARK_TOKEN] = str(token)
            try:
                return original(producer, name, message, **options)
            except BaseException:
                with contextlib.suppress(RedisError):
                    client, settings = client_for(app)
                    Parking(client, settings.prefix, call.name).drop(call.task_id, str(token))
                raise

        amqp.send_task_message = send_task_message
        amqp._redislock_park_sender = True


def _expires_in(headers: Mapping[str, Any], app: Any) -> float:
    expires = headers.get("expires")
    if not expires:
        return 0.0
    from celery.utils.time import maybe_iso8601, maybe_make_aware

    when = maybe_make_aware(maybe_iso8601(expires))
    return max(float((when - app.now()).total_seconds()), 0.001)


def _enqueue(call: _Call, envelope: dict[str, Any]) -> int | None:
    """The enqueue decision; returns the token to publish with, or None when parked."""
    task = call.task
    client, settings = client_for(task.app)
    park = park_settings(task.app)
    outcome, value = Parking(client, settings.prefix, call.name).admit(
        "enqueue", call.task_id, call.limit, json_dumps(envelope),
        _expires_in(envelope["headers"], task.app), park.deadline, park.max_parked,
        max_total=park.max_total, task_name=task.name,
    )  # fmt: skip
    call.outcome = outcome
    if outcome == "reserved":
        return int(value)
    _raise_if_bounded(outcome, value, call.name, f"{task.name}[{call.task_id}] not enqueued")
    if outcome == "parked":
        _parked(task, call.task_id, call.name, "enqueue", int(value))
    return None


def _raise_if_bounded(outcome: str, value: Any, name: str, what: str) -> None:
    if outcome == "bounded":
        raise ParkFull(
            f"{name!r}: {value} tasks parked, the bound (redislock_park_max); {what}",
            name,
            "park",
        )
    if outcome == "bounded_total":
        raise ParkFull(
            f"{value} tasks parked over all names, the bound (redislock_park_max_total); "
            f"{name!r}: {what}",
            name,
            "park",
        )


def apply_async(task: Any, name: str, task_id: str, limit: int, send: Callable[[], Any]) -> Any:
    """Run ``send`` (Celery's ``apply_async``) with the park decision at publish."""
    _install_sender(task.app)
    call = _Call(task, name, task_id, limit)
    reset = _CALL.set(call)
    try:
        return send()
    finally:
        _CALL.reset(reset)


def _parked(task: Any, task_id: str, name: str, where: str, count: int) -> None:
    log.info("%s[%s] parked (%s): %r is full, %d parked", task.name, task_id, where, name, count)
    _store_state(task.app, task_id, PARKED, {"lock": name, "where": where})
    signals.lock_parked.send(
        sender=task, task_id=task_id, name=name, kind=task._redislock_kind, where=where,
        parked=count,
    )  # fmt: skip


def _store_state(app: Any, task_id: str, state: str, meta: dict[str, Any]) -> None:
    with contextlib.suppress(NotImplementedError, AttributeError):
        app.backend.store_result(task_id, meta, state)


# -- arrival (pool child) ---------------------------------------------------


def admit(
    task: Any, request: Any, args: Sequence[Any], kwargs: Any, lease_set: LeaseSet
) -> LeaseSet:
    """Run-time admission of a park-policy task; returns the held lease set or
    raises ``Ignore`` (parked, or a copy that must not run) / ``ParkFull``."""
    name, task_id = lease_set.name, request.id
    parking = Parking(lease_set.client, lease_set.keys.prefix, name)
    owner = new_owner(lease_set.owner_prefix)
    meta = lease_set.holder_meta()
    token = header(request, HEADER_PARK_TOKEN)
    sent_at = time.monotonic()
    park = park_settings(task.app)
    if parking.client.exists(revoke_record(parking.prefix, task_id)):
        # Revoked through Redis (park.revoke, or a worker that discarded it):
        # a worker that missed the broadcast, or forgot it, must not run it.
        where, _ = parking.drop(task_id, "" if token is None else str(token))
        if where == "inflight":
            promote(task.app, name, lease_set.limit, parking.client, parking.prefix, task.name)
        log.info("%s[%s] dropped: revoked (a revoke record in Redis)", task.name, task_id)
        _mark_revoked(task.app, task_id, "revoked", request)
        raise Ignore()  # the task is done: __call__ gives its enqueue marker back
    outcome, value = "", ""
    if token is not None:
        outcome, value = parking.claim(
            task_id, str(token), owner, lease_set.ttl, meta, lease_set.limit, task.name
        )
        fate = text(value) if outcome == "drop" else ""
        if fate == "unknown" or (fate == "claimed" and _redelivered(request)):
            # Unknown: the lock Redis lost its data.  Claimed and redelivered:
            # the delivery that claimed it died before its ack and the broker
            # gave the message back (the main process released the lease).
            # Either way this copy is the task: admitted like any message
            # without a reservation.  At least once, as Celery delivers.
            token = None
    if token is None:
        envelope = envelope_of_request(task, request, args, kwargs)
        outcome, value = parking.admit(
            "arrive", task_id, lease_set.limit, json_dumps(envelope),
            _expires_in(envelope["headers"], task.app), park.deadline, park.max_parked,
            owner, lease_set.ttl, meta, park.max_total, task.name,
        )  # fmt: skip
    if outcome == "held":
        lease_set.adopt(owner, int(value), sent_at)
        return lease_set
    if outcome == "parked":
        _parked(task, task_id, name, "arrive", int(value))
        raise StillPending()
    _raise_if_bounded(outcome, value, name, f"{task.name}[{task_id}] not parked")
    log.info("%s[%s] dropped: a copy of a parked task (%s)", task.name, task_id, text(value))
    raise StillPending()


def _redelivered(request: Any) -> bool:
    return bool((getattr(request, "delivery_info", None) or {}).get("redelivered"))


# -- promotion --------------------------------------------------------------


def promote(
    app: Any, name: str, limit: int = 0, client: Any = None, prefix: str = "", task_name: str = ""
) -> int:
    """Fill the free slots of ``name`` from its park list and publish them.

    Expired tasks are marked revoked (reason ``expired``), revoked ones are
    dropped (their reservation passes on).  A publish that fails is logged;
    its reservation lapses at the deadline and the sweeper re-publishes it.
    Returns the number of messages published.
    """
    if client is None:
        client, settings = client_for(app)
        prefix = settings.prefix
    parking = Parking(client, prefix, name)
    promotions = parking.promote(limit, park_settings(app), task_name)
    return _publish_all(app, parking, promotions, limit, task_name)


def _publish_all(
    app: Any, parking: Parking, promotions: list[Promotion], limit: int, task_name: str = ""
) -> int:
    """Publish ``promotions``, and promote again while revoked ones freed slots."""
    published = 0
    for _ in range(1000):  # each round frees at least one revoked slot, or ends
        again = False
        for kind, task_id, token, raw in promotions:
            envelope = json_loads(raw)
            if kind == "x":
                log.warning("%s[%s] expired while parked: not run", envelope.get("task"), task_id)
                _never_runs(app, parking, task_id, "expired", envelope)
                continue
            if kind == "u":
                _unclaimed(app, parking, task_id, token, envelope)
                continue
            if parking.client.exists(revoke_record(parking.prefix, task_id)):
                parking.drop(task_id, str(token))
                _never_runs(app, parking, task_id, "revoked", envelope)
                again = True
                continue
            # Stored before the publish: a fast worker's own state must not be overwritten.
            _store_state(app, task_id, PROMOTED, {"lock": parking.name, "token": token})
            try:
                republish(app, envelope, token)
                published += 1
            except Exception as exc:
                log.error(
                    "could not publish parked %s[%s] (%r); re-published after its deadline",
                    envelope.get("task"), task_id, exc,
                )  # fmt: skip
        if not again:
            break
        promotions = parking.promote(limit, park_settings(app), task_name)
    return published


def _never_runs(
    app: Any, parking: Parking, task_id: str, reason: str, envelope: Mapping[str, Any] | None
) -> None:
    """A parked task's final state: REVOKED (``reason``), with the request its
    message carried so that a chord it belongs to counts it (and fails with
    ``ChordError``, as for a plain revoked member), and its enqueue marker
    (``lock_dedupe``) given back, so later calls of its key are published."""
    _mark_revoked(app, task_id, reason, _request_of(envelope))
    _dropped(app, parking, task_id, reason, envelope)


def _unclaimed(
    app: Any, parking: Parking, task_id: str, publishes: int, envelope: Mapping[str, Any]
) -> None:
    """A parked task published ``publishes`` times that no worker started:
    ``FAILURE`` with :class:`ParkUnclaimed` (errbacks and a chord it belongs
    to are told, as for any failure), never published again."""
    task_name = envelope.get("task")
    exc = ParkUnclaimed(
        f"{task_name}[{task_id}] was published {publishes} times for {parking.name!r} and no "
        f"worker started it within redislock_park_deadline each time: is a worker consuming "
        f"its queue, and does it know the task {task_name!r}?"
    )
    log.error("%s; given up (redislock_park_max_publishes)", exc)
    with contextlib.suppress(NotImplementedError, AttributeError):
        app.backend.mark_as_failure(task_id, exc, request=_request_of(envelope))
    _dropped(app, parking, task_id, "unclaimed", envelope)


def _dropped(
    app: Any, parking: Parking, task_id: str, reason: str, envelope: Mapping[str, Any] | None
) -> None:
    """Give the enqueue marker (``lock_dedupe``) back, so later calls of its key
    are published, and send ``lock_dropped``."""
    dedupe.clear(parking.client, parking.prefix, parking.name, task_id)
    task = app.tasks.get((envelope or {}).get("task") or "")
    signals.lock_dropped.send(
        sender=task, task_id=task_id, name=parking.name,
        kind=getattr(task, "_redislock_kind", "semaphore"), reason=reason,
    )  # fmt: skip


def _request_of(envelope: Mapping[str, Any] | None) -> Any:
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


def _mark_revoked(app: Any, task_id: str, reason: str, request: Any = None) -> None:
    """REVOKED in the result backend; with the task's ``request`` a chord counts it."""
    with contextlib.suppress(NotImplementedError, AttributeError):
        app.backend.mark_as_revoked(task_id, reason, request=request)


def discarded_by_worker(
    task: Any, task_id: str, token: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> None:
    """A worker discarded a promoted task before it ran (revoked, or expired):
    give its reservation back and promote into the slot at once, and keep a
    revoke record so that no copy of it is ever promoted or run later (workers
    forget revoked ids).  Celery itself marks the task REVOKED, with its request,
    so a chord counts it.  Runs in the worker's main process."""
    try:
        client, settings = client_for(task.app)
        name = task.redislock_name(args, kwargs)
        client.set(revoke_record(settings.prefix, task_id), 1, ex=REVOKE_MEMORY)
        where, _ = Parking(client, settings.prefix, name).drop(task_id, token)
        log.info(
            "%s[%s] discarded by the worker: its reservation of %r %s",
            task.name, task_id, name, "given back" if where else "had already lapsed",
        )  # fmt: skip
        signals.lock_dropped.send(
            sender=task, task_id=task_id, name=name, kind=task._redislock_kind, reason="revoked"
        )
        limit = task.redislock_limit(args, kwargs)
        promote(task.app, name, limit, client, settings.prefix, task.name)
    except Exception as exc:  # the deadline frees the slot; the record is what matters
        log.error("%s[%s]: could not give back its park reservation (%r); it lapses at its "
                  "deadline", task.name, task_id, exc)  # fmt: skip


def after_release(task: Any, name: str, limit: int) -> None:
    """Promote the next tasks after a slot was released by other means (a
    dead child's lease, released by the worker's main process)."""
    try:
        promote(task.app, name, limit, task_name=task.name)
    except RedisError as exc:
        log.error("could not promote parked tasks of %r (%r); the sweeper will", name, exc)


def releaser(task: Any, lease_set: LeaseSet, limit: int) -> Callable[[str], bool]:
    """The release of a park-policy run (for ``LeaseSet.release_through``):
    the slot is given back and the parked tasks are promoted into it in one
    call, then published.  A failed release raises (the caller logs it; the
    lease frees within its ttl and the sweeper promotes); a failed publish is
    logged (the sweeper re-publishes after the deadline)."""

    def release(owner: str) -> bool:
        parking = Parking(lease_set.client, lease_set.keys.prefix, lease_set.name)
        held, promotions = parking.release(owner, limit, park_settings(task.app), task.name)
        try:
            _publish_all(task.app, parking, promotions, limit, task.name)
        except RedisError as exc:
            log.error(
                "could not promote parked tasks of %r (%r); the sweeper will", lease_set.name, exc
            )
        return held

    return release


# -- revoke / discard / status --------------------------------------------


def revoke(app: Any, task_id: str, name: str | None = None) -> str:
    """Revoke a parked task: ``app.control.revoke`` for the workers, plus a
    revoke record in Redis that promotion honours (workers forget revoked ids).

    With ``name`` the task is removed at once ("parked" / "inflight" / "").
    Without it, it stays in the list until promotion meets and drops it.
    Either way its state becomes REVOKED, and a reservation passes on.
    """
    client, settings = client_for(app)
    client.set(revoke_record(settings.prefix, task_id), 1, ex=REVOKE_MEMORY)
    app.control.revoke(task_id)
    where = ""
    if name is not None:
        parking = Parking(client, settings.prefix, name)
        where, raw = parking.drop(task_id)
        if where == "inflight":
            promote(app, name, client=client, prefix=settings.prefix)
        _never_runs(app, parking, task_id, "revoked", json_loads(raw) if where else None)
    else:
        _mark_revoked(app, task_id, "revoked")
    return where


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
        where, raw = parking.drop(task_id)
        if where:
            removed += 1
            if where == "inflight":  # its message is in the broker: it must not run
                client.set(revoke_record(prefix, task_id), 1, ex=REVOKE_MEMORY)
            if app is not None:
                _never_runs(app, parking, task_id, "discarded", json_loads(raw))
            else:
                dedupe.clear(client, prefix, name, task_id)
    return removed


def status(
    client: Any, prefix: str, names: Sequence[str] | None = None, count: int = 0
) -> list[ParkStatus]:
    """Parked counts per name (the index's names when ``names`` is None),
    with the first ``count`` parked entries of each."""
    if names is None:
        names = sorted(text(n) for n in client.zrange(park_index(prefix), 0, -1))
    return [Parking(client, prefix, name).status(count) for name in names]


# -- holders that died with their worker --------------------------------------


def release_dead_holders(app: Any) -> int:
    """Give back the leases of processes of this machine that are provably dead
    (see core/liveness.py: a whole worker killed, whose main process could not
    clean up after its children), and promote parked work into the freed slots,
    before the leases' TTL would have freed them.  Returns how many it released."""
    client, settings = client_for(app)
    park = park_settings(app)
    released = 0
    for dead in liveness.dead_processes(client, settings.prefix):
        for name, owners in dead.holdings.items():
            parking = Parking(client, settings.prefix, name)
            for owner in owners:
                held, promotions = parking.release(owner, 0, park)
                if held:
                    released += 1
                    log.warning(
                        "released %r held by process %s, which died on this machine (owner %s)",
                        name, dead.process, owner,
                    )  # fmt: skip
                _publish_all(app, parking, promotions, 0)
        liveness.forget(client, settings.prefix, dead.process)
    return released


# -- the sweeper --------------------------------------------------------------


class Sweeper:
    """A thread that, once per interval, promotes the due names of the index.

    One ``park_due.lua`` call per interval; for each name it returns, one
    ``park_promote.lua`` call (which fills all free slots, not one) and the
    publishes.  On a cluster the index has its own slot; a name that is
    registered but has nothing to do is removed by its promotion call.
    """

    def __init__(self, app: Any, interval: float | None = None) -> None:
        self.app = app
        self.interval = interval or park_settings(app).sweep_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Sweeper:
        self._thread = threading.Thread(
            target=self._run, name="redislock-park-sweeper", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def sweep_once(self) -> int:
        client, settings = client_for(self.app)
        release_dead_holders(self.app)
        names = PARK_DUE(client, [park_index(settings.prefix)], [1000])
        published = 0
        for raw in names:
            published += promote(self.app, text(raw), 0, client, settings.prefix)
        return published

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sweep_once()
            except Exception as exc:
                log.error("park sweeper: %r (retrying next interval)", exc)


_SWEEPERS: dict[int, Sweeper] = {}


def guarded(app: Any) -> bool:
    """Whether ``app`` has a task of this library."""
    return any(getattr(t, "_redislock_kind", None) for t in app.tasks.values())


def start_sweeper(app: Any) -> None:
    """At worker start (worker.py): warn if the lock Redis persists nothing, and
    start the app's sweeper (once per app)."""
    if id(app) in _SWEEPERS:
        return
    _warn_if_volatile(app)
    _SWEEPERS[id(app)] = Sweeper(app).start()


def stop_sweepers() -> None:
    for sweeper in list(_SWEEPERS.values()):
        sweeper.stop()
    _SWEEPERS.clear()


def _warn_if_volatile(app: Any) -> None:
    """Warn when parked tasks would die with a lock Redis that persists nothing."""
    try:
        client, settings = client_for(app)
        if settings.url == app.conf.get("broker_url"):
            return
        save = client.config_get("save").get("save", "")
        aof = client.config_get("appendonly").get("appendonly", "no")
    except Exception:
        return  # CONFIG denied or Redis down: nothing to say
    if not save and aof == "no":
        log.warning(
            "celery-redislock: the lock Redis (redislock_url) is not the broker and persists "
            "nothing (no RDB save points, no AOF): parked tasks would be lost with it"
        )
