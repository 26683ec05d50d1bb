"""Outcome of a park-policy task when its message reaches a pool child.

A promoted message carries its reservation's token: while its task id is in
flight, the first copy to arrive claims the reservation as its lease
(``park_claim.lua``); a copy whose token is stale or already claimed is
acked and dropped (:class:`StillPending`), one whose token Redis does not
know (the lock Redis lost its data) is admitted as new.  A message without a
token (beat, ``send_task``, a countdown retry) goes through the same
decision as at enqueue: it runs if a slot is free and nothing is parked,
else it is parked by that same call and acked.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn

from celery.exceptions import Ignore
from redis.exceptions import RedisClusterException, RedisError

from .. import signals
from ..core.leaseset import LeaseSet
from ..core.owners import new_owner
from ..core.park import Outcome, Parking, Verdict
from ..core.rate import RateLimiter
from ..enqueue.options import HEADER_CLAIM_RETRY, HEADER_PARK_TOKEN, header
from ..settings import settings_for
from . import promotion
from .enqueue import NO_CHANGES
from .message import copy_token, envelope_of_request, expires_in, json_dumps
from .promotion import note_blocked, promote, wake_name

if TYPE_CHECKING:
    from ..policies.base import Context

from .states import (
    STATES_SEEN,
    StillPending,
    announce_parked,
    announce_superseded,
    mark_revoked,
    raise_if_bounded,
)

__all__ = [
    "back_to_the_head",
    "claim_or_arrive",
    "make_way",
    "note_waiting",
    "wait_for_a_limit",
]

log = logging.getLogger("celery_redislock")


def claim_or_arrive(
    task: Any,
    request: Any,
    args: Sequence[Any],
    kwargs: Any,
    lease_set: LeaseSet,
    park: Mapping[str, Any] = NO_CHANGES,
) -> LeaseSet:
    """Run-time admission of a park-policy task; returns the held lease set or
    raises ``Ignore`` (parked, or a copy that must not run) / ``ParkFull``.
    ``park``: changes to the app's :class:`ParkConfig` (``keep_latest``: a task
    that parks takes the place of the one parked before it, which ends
    ``SUPERSEDED``; ``debounce``)."""
    name, task_id = lease_set.name, request.id
    parking = Parking(lease_set.client, lease_set.keys.prefix, name)
    token = header(request, HEADER_PARK_TOKEN)
    owner = new_owner(lease_set.owner_prefix)
    config = replace(settings_for(task.app).park, **park)
    meta = lease_set.holder_meta()
    sent_at = time.monotonic()
    admission: Outcome | None = None
    if token is not None:
        try:
            admission = parking.claim(
                task_id, str(token), owner, lease_set.ttl, meta, lease_set.capacity, task.name
            )
        except (RedisError, RedisClusterException) as exc:
            setattr(exc, CLAIM_FAILED, True)  # a marker for run/admission.py
            raise
        headers = request.headers or {}
        retrying = HEADER_CLAIM_RETRY in headers
        if retrying:  # settled: a retry or a later promotion of this task is not one
            request.headers = {k: v for k, v in headers.items() if k != HEADER_CLAIM_RETRY}
        if admission.verdict is Verdict.DROP and (
            admission.reason == "unknown"
            or (admission.reason == "claimed" and _after_a_claim(request, retrying))
        ):
            # Unknown: the lock Redis lost its data.  Claimed: the delivery that
            # claimed it died before its ack and the broker gave the message
            # back (the main process released the lease), or this copy's own
            # claim went through with its reply lost.  Either way this copy is
            # the task: admitted like any message without a reservation.  At
            # least once, as Celery delivers.
            admission = None
    arrived = admission is None  # decided here, not a claim sent back to the park
    if admission is None:
        envelope = envelope_of_request(task, request, args, kwargs)
        admission = parking.arrive(
            task_id,
            lease_set.capacity,
            json_dumps(envelope),
            expires_in(envelope["headers"], task.app),
            config,
            owner,
            lease_set.ttl,
            meta,
            task.name,
            task.redislock_rate(args, kwargs),
            copy_token(None, os.getpid()),
            STATES_SEEN[task.app],
        )
    if admission.verdict is Verdict.REVOKED:
        _drop_revoked(task, request, parking, lease_set, token)
    if admission.verdict is Verdict.HELD:
        lease_set.adopt(owner, admission.token, sent_at)
        if admission.wait:  # starts keep the rate, not only admissions
            time.sleep(admission.wait)
        return lease_set
    if admission.verdict is Verdict.PARKED:
        announce_parked(
            task, task_id, name, "arrive", admission, config if arrived else None, parking
        )
        announce_superseded(task, admission.replaced, task_id, name, "arrive")
        raise StillPending()
    raise_if_bounded(admission, name, f"{task.name}[{task_id}] not parked")
    log.info("%s[%s] dropped: a copy of a parked task (%s)", task.name, task_id, admission.reason)
    raise StillPending()


def _drop_revoked(
    task: Any, request: Any, parking: Parking, lease_set: LeaseSet, token: object
) -> NoReturn:
    """Revoked through Redis (revoke, or a worker that discarded it): a worker
    that missed the broadcast, or forgot it, must not run it.  The claim or
    arrival that found the record took nothing; raises ``Ignore``."""
    name, task_id = parking.name, request.id
    if parking.drop(task_id, "" if token is None else str(token)).where == "inflight":
        promote(task.app, name, lease_set.capacity, parking.client, parking.prefix, task.name)
    log.info("%s[%s] dropped: revoked (a revoke record in Redis)", task.name, task_id)
    mark_revoked(task.app, task_id, "revoked", request, lock=parking, task_name=task.name)
    signals.lock_dropped.send(
        sender=task, task_id=task_id, name=name, kind=task._redislock_kind, reason="revoked"
    )
    raise Ignore()  # the task is done: __call__ gives its enqueue marker back


#: set on a Redis error raised by the claim of a promoted copy
CLAIM_FAILED = "_redislock_claim_failed"


def _after_a_claim(request: Any, retrying: bool) -> bool:
    """Whether a copy whose token was claimed is the task all the same: one
    the broker gave back (marked redelivered: the delivery that claimed it
    died), or one published again after its own claim failed on a Redis
    error (``retrying``: header ``redislock_claim_retry``; that claim may
    have gone through with its reply lost), unless it went to its claim
    finding the reservation still unclaimed (``redislock_claim_first``):
    then a twin copy claimed it meanwhile and runs it, and this one is a
    duplicate.  (A copy of its id still running is met before the claim:
    run/admission.py ``defer_to_earlier_delivery``.)"""
    if getattr(request, "redislock_claim_first", False):
        return False
    redelivered = (getattr(request, "delivery_info", None) or {}).get("redelivered")
    return bool(redelivered) or retrying


def back_to_the_head(
    task: Any,
    request: Any,
    args: Sequence[Any],
    kwargs: Any,
    lease_set: LeaseSet,
    seconds: float,
) -> StillPending:
    """A running park-policy task pauses its key for ``seconds`` and goes back to
    the head of the key's park (same task id, its message as it arrived); the
    caller raises the returned :class:`StillPending`, so the run ends, its
    slot is given back and nothing else of the key starts before the pause
    ends.  State ``PARKED``; signals ``lock_parked`` and ``lock_rate_limited``."""
    return _back_to_the_head(task, request, args, kwargs, lease_set, seconds)[0]


def _back_to_the_head(
    task: Any,
    request: Any,
    args: Sequence[Any],
    kwargs: Any,
    lease_set: LeaseSet,
    seconds: float,
    hold: float = 0.0,
    waits_for: str | None = None,
    replaceable: bool = False,
) -> tuple[StillPending, bool]:
    """:func:`back_to_the_head`, or with ``hold`` (a run refused by the full
    listed limit ``waits_for``) the key's parked work held that long instead
    of a pause; and whether the key's park now has the task's work (not: a
    copy of it is parked or in flight already, and that copy runs).
    ``replaceable`` (a ``keep_latest`` run): it goes back as the key's
    pending call, which a newer call replaces, and a newer call parked
    already takes its place now (``SUPERSEDED``, where ``"limit"``); a run
    put back so that was admitted before it (a lower fencing token) gives
    way to it instead."""
    envelope = envelope_of_request(task, request, args, kwargs)
    parking = Parking(lease_set.client, lease_set.keys.prefix, lease_set.name)
    admission = parking.park_at_head(
        request.id,
        lease_set.capacity,
        json_dumps(envelope),
        expires_in(envelope["headers"], task.app),
        seconds,
        task.name,
        task.redislock_rate(args, kwargs),
        copy_token(header(request, HEADER_PARK_TOKEN), os.getpid()),
        hold,
        waits_for or "",
        (lease_set.token or 0) if replaceable else 0,
    )
    if admission.verdict is Verdict.SUPERSEDED:
        announce_superseded(task, [request.id], admission.reason, lease_set.name, "limit")
        return StillPending(), True
    if admission.verdict is Verdict.PARKED:
        announce_superseded(task, admission.replaced, request.id, lease_set.name, "limit")
        where = "pause" if waits_for is None else "limit"
        announce_parked(
            task, request.id, lease_set.name, where, admission, parking=parking, waits_for=waits_for
        )
        return StillPending(), True
    if seconds > 0:  # a copy of this task is parked or in flight already: it runs
        RateLimiter(lease_set.client, lease_set.name, prefix=lease_set.keys.prefix).pause(seconds)
    log.info(
        "%s[%s] back to %r%s; a copy of it is already %s, and that copy runs",
        task.name,
        request.id,
        lease_set.name,
        " (paused)" if seconds > 0 else "",
        admission.reason,
    )
    return StillPending(), False


def wait_for_a_limit(ctx: Context, replaceable: bool = False) -> StillPending:
    """A park-policy run whose own slot is held and whose listed limit
    ``ctx.refused_by`` refused it waits in its park, holding nothing; the
    caller raises the returned :class:`StillPending`.

    In this order, so that no wake-up is lost: the run goes back to the head
    of its name's park with the name's parked work held for that limit
    (:data:`~celery_redislock.parking.promotion.LISTED_RETRY`, or the
    limit's rate wait when its rate refused it); its own slot is given back
    through the park's release (whose promotions wait for the hold;
    ``lock_released`` with reason ``"limit"``); then, if it was parked and
    the limit was full, the name is noted in the limit's blocked set
    (:func:`note_waiting`).  A process that dies between these steps leaves
    the task parked: the hold ends by itself.  Not parked because Redis
    failed: the own slot is given back the same way and the error raised.
    ``replaceable`` (``keep_latest``): the run goes back as the key's
    pending call; when a newer call is parked already, that call takes its
    place (this run ends ``SUPERSEDED``) and waits for the limit instead."""
    task, request, lease_set = ctx.task, ctx.request, ctx.need_lease_set()
    limit = ctx.refused_by
    assert limit is not None and ctx.refused_limit is not None
    full = ctx.rate_wait is None
    hold = promotion.LISTED_RETRY if full else max(ctx.rate_wait or 0.0, 0.001)
    try:
        pending, parked = _back_to_the_head(
            task, request, ctx.args, ctx.kwargs, lease_set, 0.0, hold, limit, replaceable
        )
    finally:
        task._redislock_release(request, lease_set, "limit")
    if parked and full:
        note_waiting(task, request.id, lease_set, limit, ctx.refused_limit)
    return pending


def make_way(
    task: Any,
    request_id: str,
    own: LeaseSet,
    limit: str,
    asks: int,
    in_flight: int,
    handed_at: int,
) -> None:
    """A run of ``own``'s name that held the listed limit ``limit`` ended, its
    slot of the limit went to a name that waited for it, and its own release
    held the name's parked work for the limit (``park_release.lua`` ARGV[9]:
    rather than promote its next task into a limit it would not get, sent
    back, a cycle through the broker for nothing): note the name behind the
    names waiting (:func:`note_waiting`, which wakes it at once if the limit
    has room for it and nobody is noted before it, so no wake-up is lost;
    the ``in_flight`` tasks published for the names just woken count as
    taking their slots), just before the names noted at or after
    ``handed_at`` (the Redis time of the release that handed the slot on,
    when the name it woke was noted again: its next turn comes after this
    one's).  Never raises: a failure leaves the hold to end by
    itself."""
    try:
        note_waiting(task, request_id, own, limit, asks, in_flight, turn=handed_at)
    except Exception as exc:
        log.warning("%s[%s]: could not make way on %r (%r)", task.name, request_id, limit, exc)


def note_waiting(
    task: Any,
    request_id: str,
    lease_set: LeaseSet,
    limit: str,
    asks: int,
    in_flight: int = 0,
    turn: int = 0,
) -> None:
    """After :func:`wait_for_a_limit` parked the task and gave its own slot
    back: note the name in the limit's blocked set with the limit its head
    asks of it (``asks``; ``limit_block.lua``), unless (``check``) the limit
    has room for that head now, a slot having come back between the
    refusal and the note, and no name noted before it: then the name is
    woken at once (:func:`wake_name`; the rest of its parked work held for
    the limit when its name is the same for every call of the task).  The
    check and the note are one script call
    (:func:`~celery_redislock.parking.promotion.note_blocked`).  A process
    that dies before the note, or a Redis error here, leaves the task
    parked: its hold ends by itself.  ``in_flight``: slots of the limit to
    count as taken besides its holders (a name just woken for the slot a run
    gave back, on its way to take it).  ``turn``: when a run of the name
    handed its slot on (it makes way; Redis time, us): noted then, not with
    the names new to the round (``note_blocked``)."""
    try:
        holds = limit in type(task)._redislock_listed_fixed
        client, prefix = lease_set.client, lease_set.keys.prefix
        noted = note_blocked(client, prefix, lease_set.name, limit, asks, in_flight, holds, turn)
        if not noted:
            wake_name(task.app, lease_set.name, limit, asks if holds else None, in_flight)
    except (RedisError, RedisClusterException) as exc:
        log.warning(
            "%s[%s]: could not note that %r waits for %r (%r); it is tried again in %g s",
            task.name,
            request_id,
            lease_set.name,
            limit,
            exc,
            promotion.LISTED_RETRY,
        )
