"""``retry``: a contended task is re-published (same task id) after a countdown."""

from __future__ import annotations

import logging
import math
import random
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NoReturn

from celery.exceptions import Retry as CeleryRetry

from ..core.errors import LockContended
from ..enqueue.options import (
    HEADER_DEFERRED,
    HEADER_REQUEUES,
    HEADER_RETRIES_FROM_REQUEUES,
    header,
)
from ..parking.states import StillPending
from .base import Context, Policy, take

__all__ = ["Retry", "requeue", "restore_retries"]

log = logging.getLogger("celery_redislock")


class Retry(Policy):
    """Frees the worker process at once; the task comes back after
    ``lock_retry_countdown + uniform(0, lock_retry_jitter)`` seconds, at most
    ``lock_retry_max`` times (a header of its own: ``max_retries`` is not
    touched), then fails with :class:`LockContended`.

    To Celery a requeue is a retry (state ``RETRY``, and the message's
    ``retries`` counts it, so Flower and exporters show the count); the
    body's ``self.request.retries`` and ``max_retries`` see only its own
    retries (:func:`restore_retries`, before admission).

    Under eager execution there is no queue to come back through, so it
    waits like ``wait``.
    """

    name = "retry"
    waits_when_eager = True

    def acquire(self, ctx: Context) -> bool:
        return take(ctx, blocking=ctx.request.is_eager)

    def contended(self, ctx: Context) -> NoReturn:
        task = ctx.task
        # Refused by its rate: back when the rate admits it, not after the countdown.
        base = task.lock_retry_countdown if ctx.rate_wait is None else ctx.rate_wait
        requeue(ctx, base + random.uniform(0, task.lock_retry_jitter))


#: no extra headers for a requeued copy
NO_MARKS: Mapping[str, Any] = MappingProxyType({})


def requeue(
    ctx: Context, countdown: float, deferred: bool = False, marks: Mapping[str, Any] = NO_MARKS
) -> NoReturn:
    """Run phase: publish the task again (same id, same arguments) after
    ``countdown`` and raise Celery's ``Retry`` (state ``RETRY``), or raise
    :class:`LockContended` when a counted requeue would exceed ``lock_retry_max``.

    ``deferred``: a copy making way for an earlier delivery of its task id
    (run/admission.py ``defer_to_earlier_delivery``): not counted against
    ``lock_retry_max``, marked (``HEADER_DEFERRED``) so that, back again, it
    can tell whether that delivery ran to its end, and ended with
    :class:`~celery_redislock.parking.StillPending` instead of ``Retry``: it
    stores no state, since the task's state is that delivery's.  ``marks``:
    more headers for the copy.
    """
    task, request = ctx.task, ctx.request
    headers = dict(request.headers or {})
    headers.pop("redelivered", None)
    done = int(headers.get(HEADER_REQUEUES) or 0)
    headers.update(marks)
    if deferred:
        headers[HEADER_DEFERRED] = 1
    else:
        done += 1
        if task.lock_retry_max is not None and done > task.lock_retry_max:
            what = ctx.refusal if ctx.refused_by else f"{ctx.kind} {ctx.name!r} still held"
            message = f"{what} after {task.lock_retry_max} requeues (policy retry)"
            log.warning("%s[%s] failed: %s", task.name, request.id, message)
            raise LockContended(message, ctx.refused_by or ctx.name, "retry")
    headers[HEADER_REQUEUES] = done
    requeued = int(header(request, HEADER_RETRIES_FROM_REQUEUES) or 0) + 1
    headers[HEADER_RETRIES_FROM_REQUEUES] = requeued
    queue = consumed_queue(task.app, request.delivery_info)
    if countdown % 1 and native_delayed_delivery(task.app):
        # Celery routes it by int(countdown) there: 0 is refused, and a
        # rate's wait cut short comes back before its rate admits it
        countdown = float(math.ceil(countdown))
    signature = task.signature_from_request(
        request,
        ctx.args,
        ctx.kwargs,
        queue=queue,
        countdown=countdown,
        retries=int(request.retries or 0) + requeued,
        headers=headers,
    )
    log.info(
        "%s[%s] requeued in %.2f s: %s (requeue %d)",
        task.name,
        request.id,
        countdown,
        ctx.refusal,
        done,
    )
    signature.apply_async()
    if deferred:
        # a copy: the task's state is its earlier delivery's, which still runs
        raise StillPending()
    raise CeleryRetry(f"{ctx.refusal}; requeued", when=countdown)


#: the routing key of a message RabbitMQ's delayed exchanges delivered: the
#: bits of its delay (kombu.transport.native_delayed_delivery, 28 of them),
#: then the key it was sent with
_DELAY_BITS = re.compile(r"^(?:[01]\.){28}")


def consumed_queue(app: Any, delivery_info: Mapping[str, Any] | None) -> str | None:
    """The app's queue a message was delivered to, when its exchange and
    routing key name one (among them, the one this worker consumes), else
    None.

    A requeue names it, where Celery's own retry passes only the exchange and
    routing key: with quorum queues and a countdown, Celery's native delayed
    delivery (Celery >= 5.5) routes a message by its queue, the default one
    when none is named, so a requeue of a task routed elsewhere would go to
    the default queue (a worker consuming only its own queue never sees it).  A
    message the delayed exchanges delivered names its queue by its routing
    key alone (its exchange is theirs)."""
    info = delivery_info or {}
    exchange, routing_key = info.get("exchange") or "", str(info.get("routing_key") or "")
    delayed = _DELAY_BITS.match(routing_key)
    if delayed:  # came through the delayed exchanges: the key after the bits
        routing_key = routing_key[delayed.end() :]
    elif not exchange:
        return routing_key or None  # the anonymous exchange: the key is the queue
    queues = app.amqp.queues
    known = [
        q
        for q in queues.values()
        if q.routing_key == routing_key
        and (delayed or getattr(q.exchange, "name", None) == exchange)
    ]
    consumed = [q for q in known if q.name in (queues.consume_from or {})]
    # None unless one queue is meant: Celery's own route then (its exchange
    # and routing key reach every queue bound by them)
    one = consumed if len(consumed) == 1 else known
    return str(one[0].name) if len(one) == 1 else None


def native_delayed_delivery(app: Any) -> bool:
    """Whether Celery publishes countdowns through RabbitMQ's delayed
    exchanges (quorum queues, Celery >= 5.5), which take whole seconds."""
    try:
        from celery.utils.quorum_queues import detect_quorum_queues
    except ImportError:  # Celery < 5.5
        return False
    try:
        with app.connection_for_write() as connection:
            return bool(detect_quorum_queues(app, connection.transport.driver_type)[0])
    except Exception:  # the publish itself will say what is wrong
        return False


def restore_retries(request: Any) -> None:
    """At the start of a run: take the requeues back out of Celery's
    ``request.retries`` (the body's budget is its own), and out of the
    request's headers, so a retry the body makes starts counting afresh."""
    requeued = int(header(request, HEADER_RETRIES_FROM_REQUEUES) or 0)
    if requeued:
        request.retries = max(0, int(request.retries or 0) - requeued)
        headers = dict(getattr(request, "headers", None) or {})
        headers.pop(HEADER_RETRIES_FROM_REQUEUES, None)
        request.headers = headers
