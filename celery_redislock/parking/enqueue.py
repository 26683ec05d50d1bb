"""The caller's side of parking: the decision at publish.

``apply_async`` of a park-policy task runs Celery's own publish with a
context variable set; the wrapped ``app.amqp.send_task_message`` sees the
message exactly as Celery built it (routing done) and makes one
``park_enqueue.lua`` call: the task is published with a reservation's token,
or stored in the park and not published (``PARKED``; with ``keep_latest``
it takes the place of the task parked before it, which ends ``SUPERSEDED``),
or refused with :class:`ParkFull`.  A publish that fails after a reservation gives the
reservation back, so its slot is not held for a message that never left.
``retry_at_head`` stores a running run's retry ahead of its key's park instead
(``keep_latest``: the pending call starts after the run's retries).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from ..core.capacity import Capacity
from ..core.park import Parking, Verdict
from ..core.rate import NO_RATE, RateTerms
from ..enqueue.options import HEADER_PARK_TOKEN
from ..run.task_lease_set import capacity_of
from ..settings import client_for
from .message import announce_sent, envelope_of_publish, eta_in, expires_in, json_dumps
from .states import STATES_SEEN, announce_parked, announce_superseded, raise_if_bounded

__all__ = ["park_or_publish", "retry_at_head"]

log = logging.getLogger("celery_redislock")


@dataclass
class _Call:
    task: Any
    name: str
    task_id: str
    capacity: Capacity
    rate: RateTerms
    park: Mapping[str, Any]  #: changes to the app's ParkConfig for this call
    retry: bool = False  #: a retry of the running run: stored at the head
    token: str = ""  #: with retry: the promotion token the run was claimed with
    #: the Redis error of the decision, raised by the caller once Celery's
    #: publish returned (inside it, a Redis broker's transport would report
    #: it as its own ``OperationalError``, a broker error)
    failed: BaseException | None = None


NO_CHANGES: Mapping[str, Any] = MappingProxyType({})
_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("redislock_park", default=None)
_INSTALL_LOCK = threading.Lock()


def park_or_publish(
    task: Any,
    name: str,
    task_id: str,
    limit: int,
    send: Callable[[], Any],
    rate: RateTerms = NO_RATE,
    park: Mapping[str, Any] = NO_CHANGES,
) -> Any:
    """Run ``send`` (Celery's ``apply_async``) with the park decision at publish;
    ``park``: changes to the app's :class:`ParkConfig` (``keep_latest``, ``debounce``)."""
    call = _Call(task, name, task_id, capacity_of(task, limit), rate, park)
    return _send(call, send)


def retry_at_head(
    task: Any,
    name: str,
    task_id: str,
    limit: int,
    send: Callable[[], Any],
    rate: RateTerms,
    token: str,
) -> Any:
    """Run ``send`` (the ``apply_async`` of ``self.retry``) so that the retry's
    message is stored ahead of everything parked for ``name`` and not published,
    and the key is paused until the message's ``eta`` (the retry's countdown):
    when the running run releases, nothing of the key starts before the retry,
    which is promoted when the pause ends.  ``token``: the promotion token the
    run was claimed with ("": none), made stale so that a redelivered copy
    never runs."""
    call = _Call(task, name, task_id, capacity_of(task, limit), rate, NO_CHANGES, True, token)
    return _send(call, send)


def _send(call: _Call, send: Callable[[], Any]) -> Any:
    """Run ``send`` with ``call`` as the park call its publish decides; the
    decision's Redis error, if any, is raised here (nothing was published)."""
    amqp = call.task.app.amqp
    if not getattr(amqp, "_redislock_park_sender", False):
        _install_sender(call.task.app)
    reset = _CALL.set(call)
    try:
        result = send()
    finally:
        _CALL.reset(reset)
    if call.failed is not None:
        raise call.failed
    return result


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
            try:
                token = _enqueue(call, envelope_of_publish(app, message, options))
            except (RedisError, RedisClusterException) as exc:
                call.failed = exc
                return None
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


def _enqueue(call: _Call, envelope: dict[str, Any]) -> int | None:
    """The enqueue decision; returns the token to publish with, or None when
    not published (parked, or already parked or in flight)."""
    task = call.task
    client, settings = client_for(task.app)
    if call.retry:
        _park_retry(call, envelope)
        return None
    config = replace(settings.park, **call.park)
    parking = Parking(client, settings.prefix, call.name)
    admission = parking.enqueue(
        call.task_id,
        call.capacity,
        json_dumps(envelope),
        expires_in(envelope["headers"], task.app),
        config,
        task.name,
        call.rate,
        STATES_SEEN[task.app],
    )
    if admission.verdict is Verdict.RESERVED:
        return admission.token
    raise_if_bounded(admission, call.name, f"{task.name}[{call.task_id}] not enqueued")
    if admission.verdict is Verdict.PARKED:
        announce_sent(task.app, envelope)  # the task-sent Celery did not send
        announce_parked(task, call.task_id, call.name, "enqueue", admission, config, parking)
        announce_superseded(task, admission.replaced, call.task_id, call.name, "enqueue")
    return None


def _park_retry(call: _Call, envelope: dict[str, Any]) -> None:
    task, headers = call.task, envelope["headers"]
    client, settings = client_for(task.app)
    parking = Parking(client, settings.prefix, call.name)
    admission = parking.park_at_head(
        call.task_id,
        call.capacity,
        json_dumps(envelope),
        expires_in(headers, task.app),
        eta_in(headers, task.app),
        task.name,
        call.rate,
        call.token,
    )
    if admission.verdict is Verdict.PARKED:
        announce_sent(task.app, envelope)
        announce_parked(task, call.task_id, call.name, "retry", admission, parking=parking)
    else:  # a copy of this task is parked or in flight already: it is the one that runs
        log.info(
            "%s[%s] retry not stored: a copy of it is already %s",
            task.name,
            call.task_id,
            admission.reason,
        )
