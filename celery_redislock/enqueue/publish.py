"""What ``apply_async`` of a guarded task does before anything is published.

In order: the per-call options become message headers (checked here, so a
bad option fails at call time), the lock name is built from the arguments
(a key template naming a missing argument fails here too), the enqueue
marker of ``lock_dedupe`` is claimed, and the policy publishes (``park`` may
store the message in Redis instead).  A marker claimed for a message that
was not published is given back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from celery.utils import uuid

from ..policies import POLICIES, Context, Policy, check_call, check_policy
from . import dedupe, options

__all__ = ["publish_call"]


def _opens_a_window(task: Any, policy: Policy, task_id: str) -> bool:
    """Whether this call is decided by ``lock_throttle``'s window (no trailing
    run; not eager; not a retry of the running task, which keeps its window)."""
    if task.lock_throttle is None or task.lock_throttle_trailing or not policy.coalesces:
        return False
    if task.app.conf.task_always_eager:
        return False
    request = task.request
    return bool(request.called_directly or task_id != request.id)


def publish_call(
    task: Any,
    args: Any,
    kwargs: Any,
    task_id: str | None,
    call: dict[str, Any],
    send: Callable[[str], Any],
) -> Any:
    """Publish a call of ``task`` (``send(task_id)`` publishes it as Celery
    would, with ``call`` as its options); returns its ``AsyncResult``.

    With de-duplication, a call whose key already has a queued or running
    message returns that message's ``AsyncResult`` and publishes nothing.
    """
    headers = options.call_headers(call, check_policy)
    headers.setdefault(options.HEADER_SENT_AT, time.time())  # a requeue keeps the call's
    name = task.redislock_name(args, kwargs)
    if options.HEADER_CLAIM_RETRY not in headers:  # a copy whose claim failed keeps it
        headers.pop(options.HEADER_PARK_TOKEN, None)  # a promotion token is for one publish
    policy = POLICIES[check_policy(headers.get(options.HEADER_POLICY) or task.lock_policy)]
    policy.check_rate(task.name, type(task)._redislock_rate)  # a per-call lock_policy
    check_call(task, policy, policy.coalesces and dedupe.wanted(task, task_id, headers))
    task_id, claimed, holder = dedupe.before_publish(task, name, task_id or uuid(), headers, call)
    if holder is None and _opens_a_window(task, policy, task_id):
        holder = dedupe.claim_window(task, name, task_id)
    if holder is not None:
        return task.AsyncResult(holder)
    if headers:
        call["headers"] = headers
    ctx = Context(
        phase="enqueue",
        task=task,
        name=name,
        task_id=task_id,
        args=args,
        kwargs=kwargs,
        call=call,
        send=lambda: send(task_id),
    )
    try:
        result = policy.publish(ctx)
    except BaseException:
        if claimed:
            dedupe.clear_for(task, task_id, args, kwargs)  # not published: give it back
        raise
    if claimed and task.app.conf.task_always_eager:
        # The eager run (and its eager retries) is over: this task id no
        # longer has a queued or running message.
        dedupe.clear_for(task, task_id, args, kwargs)
    return result
