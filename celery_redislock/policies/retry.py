"""``retry``: a contended task is re-published (same task id) after a countdown."""

from __future__ import annotations

import logging
import random
from typing import NoReturn

from celery.exceptions import Retry

from ..core.errors import LockContended
from ..core.owners import execution_tag
from ..options import HEADER_REQUEUES
from .base import Attempt, Policy, announce_contended

__all__ = ["Requeue", "defer_to_earlier_delivery", "requeue"]

log = logging.getLogger("celery_redislock")


class Requeue(Policy):
    """Frees the worker process at once; the task comes back after
    ``lock_retry_countdown + uniform(0, lock_retry_jitter)`` seconds, at most
    ``lock_retry_max`` times (a header of its own: ``max_retries`` is not
    touched), then fails with :class:`LockContended`.

    Under eager execution there is no queue to come back through, so it
    waits like ``wait``.
    """

    name = "retry"

    def acquire(self, attempt: Attempt) -> bool:
        if attempt.request.is_eager:
            return attempt.lease_set.acquire(blocking=True, timeout=attempt.wait_timeout)
        return attempt.lease_set.acquire(blocking=False)

    def contended(self, attempt: Attempt) -> NoReturn:
        task = attempt.task
        countdown = task.lock_retry_countdown + random.uniform(0, task.lock_retry_jitter)
        requeue(attempt, countdown, count=True)


def requeue(attempt: Attempt, countdown: float, count: bool) -> NoReturn:
    """Publish the task again (same id) after ``countdown`` and raise ``Retry``.

    ``count``: whether this requeue counts against ``lock_retry_max``.
    """
    task, request = attempt.task, attempt.request
    headers = dict(request.headers or {})
    headers.pop("redelivered", None)
    done = int(headers.get(HEADER_REQUEUES) or 0)
    if count:
        done += 1
        if task.lock_retry_max is not None and done > task.lock_retry_max:
            message = (
                f"{attempt.kind} {attempt.name!r} still held after "
                f"{task.lock_retry_max} requeues (policy retry)"
            )
            log.warning("%s[%s] failed: %s", task.name, request.id, message)
            raise LockContended(message, attempt.name, "retry")
    headers[HEADER_REQUEUES] = done
    signature = task.signature_from_request(
        request,
        attempt.args,
        attempt.kwargs,
        countdown=countdown,
        retries=request.retries,
        headers=headers,
    )
    log.info(
        "%s[%s] requeued in %.2f s: %s %r is held (requeue %d)",
        task.name,
        request.id,
        countdown,
        attempt.kind,
        attempt.name,
        done,
    )
    signature.apply_async()
    raise Retry(f"{attempt.kind} {attempt.name!r} is held; requeued", when=countdown)


def defer_to_earlier_delivery(attempt: Attempt, contended: bool = False) -> None:
    """Requeue (uncounted) if an earlier delivery of this task id still holds the name.

    That is a redelivery after ``visibility_timeout``, or the run after a
    ``retry(throw=False)``: running alongside the earlier one, or waiting on
    it, would be wrong.  Before acquiring, only re-runs (marked redelivered,
    or ``retries > 0``) look; after a refused acquisition (``contended``)
    every run looks, since a copy can carry no redelivered mark: one published
    again with the same task id by a producer or by hand (RabbitMQ and every
    kombu Redis transport from 5.3 on do mark their own redeliveries).
    """
    task, request = attempt.task, attempt.request
    rerun = request.retries or (request.delivery_info or {}).get("redelivered")
    if not (rerun or contended):
        return
    tag = execution_tag(request.id)
    mine = [h for h in attempt.lease_set.holders() if h.owner.startswith(tag)]
    if mine:
        announce_contended(attempt, "redelivered")
        delay = min(max(h.expires_in for h in mine), max(task.lock_retry_countdown, 0.5))
        requeue(attempt, delay + random.uniform(0, task.lock_retry_jitter), count=False)
