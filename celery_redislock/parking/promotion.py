"""Promotion: parked tasks take the slots that free, and are published again.

Runs where a slot frees: in the pool child that releases (one
``park_release.lua`` call gives the slot back and reserves the freed slots
for the head of the park), in the worker's main process (a dead child's
lease, a task the worker discarded, holders that died with their worker),
and in the sweeper.  Each promotion is stored ``PROMOTED`` before its
publish, so a fast worker's own state is never overwritten.  A publish that
fails is logged; its reservation lapses at its deadline and the sweeper
publishes it again with a new token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from redis.exceptions import RedisError

from .. import signals
from ..core import liveness
from ..core.capacity import Capacity
from ..core.keys import lease_keys, limits_to_wake
from ..core.leaseset import LeaseSet
from ..core.owners import execution_tag
from ..core.park import WAIT_LEASE_MS, Parking, Promotion, PromotionKind
from ..core.scripts import (
    LIMIT_BLOCK,
    LIMIT_CHANGED_TAKE,
    LIMIT_FORGET,
    LIMIT_RELEASE,
    LIMIT_WAKE,
    text,
)
from ..enqueue import dedupe
from ..run.task_lease_set import capacity_of
from ..settings import client_for, settings_for
from .message import announce_sent, json_loads, republish, request_of
from .states import PROMOTED, STATES_SEEN, ParkUnclaimed, mark_failed, mark_revoked, store_state

__all__ = [
    "after_release",
    "discarded_by_worker",
    "never_runs",
    "promote",
    "release_and_promote",
    "release_dead_holders",
    "release_listed",
    "wake_name",
    "wake_waiting_for",
]

log = logging.getLogger("celery_redislock")


def promote(
    app: Any,
    name: str,
    capacity: Capacity | None = None,
    client: Any = None,
    prefix: str = "",
    task_name: str = "",
) -> int:
    """Fill the free slots of ``name`` from its park and publish them.

    Expired tasks are marked revoked (reason ``expired``), revoked ones are
    dropped (their reservation passes on).  A publish that fails is logged;
    its reservation lapses at the deadline and the sweeper re-publishes it.
    Returns the number of messages published.
    """
    if client is None:
        client, settings = client_for(app)
        prefix = settings.prefix
    parking = Parking(client, prefix, name)
    promotions = parking.promote(capacity, settings_for(app).park, task_name, STATES_SEEN[app])
    return _publish_all(app, parking, promotions, capacity, task_name)


def _publish_all(
    app: Any,
    parking: Parking,
    promotions: list[Promotion],
    capacity: Capacity | None,
    task_name: str = "",
    sent: list[str] | None = None,
) -> int:
    """Publish ``promotions``, and promote again while revoked ones freed
    slots; the ids of the tasks published are appended to ``sent``."""
    published = 0
    for _ in range(1000):  # each round frees at least one revoked slot, or ends
        again = False
        for promotion in promotions:
            task_id, token = promotion.task_id, promotion.token
            envelope = json_loads(promotion.envelope)
            if promotion.kind is PromotionKind.EXPIRED:
                log.warning("%s[%s] expired while parked: not run", envelope.get("task"), task_id)
                never_runs(app, parking, task_id, "expired", envelope)
                continue
            if promotion.kind is PromotionKind.UNCLAIMED:
                _unclaimed(app, parking, task_id, token, envelope)
                continue
            if parking.is_revoked(task_id):
                parking.drop(task_id, str(token))
                never_runs(app, parking, task_id, "revoked", envelope, promotion.guard)
                again = True
                continue
            if promotion.kind is PromotionKind.REPUBLISH:
                log.warning(
                    "%s[%s] published again for %r: no worker started its promoted message "
                    "within redislock_park_deadline (lost, purged, or in a queue slower than "
                    "the deadline or that no worker consumes)",
                    envelope.get("task"),
                    task_id,
                    parking.name,
                )
            meta = {"lock": parking.name, "token": token}
            store_state(
                app,
                task_id,
                PROMOTED,
                meta,
                parking,
                envelope.get("task") or "",
                needs="inflight",
                guard=promotion.guard,
            )
            try:
                republish(app, envelope, token)
                published += 1
                if sent is not None:
                    sent.append(task_id)
                announce_sent(app, envelope)
                task = app.tasks.get(envelope.get("task") or "")
                signals.lock_promoted.send(
                    sender=task,
                    task_id=task_id,
                    name=parking.name,
                    token=token,
                    kind=getattr(task, "_redislock_kind", "semaphore"),
                )
            except Exception as exc:
                log.error(
                    "could not publish parked %s[%s] (%r); re-published after its deadline",
                    envelope.get("task"),
                    task_id,
                    exc,
                )
        if not again:
            break
        promotions = parking.promote(capacity, settings_for(app).park, task_name, STATES_SEEN[app])
    return published


def never_runs(
    app: Any,
    parking: Parking,
    task_id: str,
    reason: str,
    envelope: Mapping[str, Any] | None,
    guard: str = "",
) -> None:
    """A parked task's final state: REVOKED (``reason``), with the request its
    message carried so that a chord it belongs to counts it (and fails with
    ``ChordError``, as for a plain revoked member), and its enqueue marker
    (``lock_dedupe``) given back, so later calls of its key are published.
    ``guard``: the holder of its state guard, when its promotion took it."""
    task_name = (envelope or {}).get("task") or ""
    # No envelope: it was not found in the park (it may have run, or be in the
    # broker still), so not written as a parked task's state.
    where = parking if envelope is not None else ""
    mark_revoked(app, task_id, reason, request_of(envelope), where, task_name, guard)
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
    mark_failed(app, task_id, exc, request_of(envelope), parking, task_name or "")
    _dropped(app, parking, task_id, "unclaimed", envelope)


def _dropped(
    app: Any, parking: Parking, task_id: str, reason: str, envelope: Mapping[str, Any] | None
) -> None:
    """Give the enqueue marker (``lock_dedupe``) back, so later calls of its key
    are published, and send ``lock_dropped``."""
    task_name = (envelope or {}).get("task") or ""
    # Without its message (revoked by name while still in the broker) the task
    # name is unknown: try each de-duplicating task's marker (a no-op unless
    # this task id holds it).
    names = (
        [task_name]
        if task_name
        else [t.name for t in app.tasks.values() if getattr(t, "lock_dedupe", False)]
    )
    for name in names:
        dedupe.clear(parking.client, parking.prefix, parking.name, name, task_id)
    task = app.tasks.get(task_name)
    signals.lock_dropped.send(
        sender=task,
        task_id=task_id,
        name=parking.name,
        kind=getattr(task, "_redislock_kind", "semaphore"),
        reason=reason,
    )


def release_and_promote(
    task: Any,
    lease_set: LeaseSet,
    limit: int,
    making_way: str = "",
    note_behind: Callable[[], None] | None = None,
) -> None:
    """The release of a park-policy run (through ``LeaseSet.release_through``,
    so it raises as ``LeaseSet.release`` does): the slot is given back and
    the parked tasks are promoted into it in one call, then published.  A
    failed release raises (the caller logs it; the lease frees within its
    ttl and the sweeper promotes); a failed publish is logged (the sweeper
    re-publishes after the deadline).  With
    ``making_way`` (a listed limit whose slot the run gave to a name that
    waited for it), the same call first holds the name's parked work for that
    limit (:data:`LISTED_RETRY` at most), and once it is held ``note_behind``
    notes the name behind the names waiting."""

    capacity = capacity_of(task, limit)

    def release(owner: str) -> bool:
        parking = Parking(lease_set.client, lease_set.keys.prefix, lease_set.name)
        config = settings_for(task.app).park
        held, promotions, held_for = parking.release_making_way(
            owner, capacity, config, task.name, making_way, LISTED_RETRY, STATES_SEEN[task.app]
        )
        try:
            _publish_all(task.app, parking, promotions, capacity, task.name)
        except RedisError as exc:
            log.error(
                "could not promote parked tasks of %r (%r); the sweeper will", lease_set.name, exc
            )
        if held_for and note_behind is not None:
            note_behind()
        return held

    lease_set.release_through(release)


def after_release(task: Any, name: str, limit: int) -> None:
    """Promote the next tasks after a slot was released by other means (a
    dead child's lease, released by the worker's main process)."""
    try:
        promote(task.app, name, capacity_of(task, limit), task_name=task.name)
    except RedisError as exc:
        log.error("could not promote parked tasks of %r (%r); the sweeper will", name, exc)


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
        parking = Parking(client, settings.prefix, name)
        parking.record_revoke(task_id)
        where = parking.drop(task_id, token).where
        log.info(
            "%s[%s] discarded by the worker: its reservation of %r %s",
            task.name,
            task_id,
            name,
            "given back" if where else "had already lapsed",
        )
        signals.lock_dropped.send(
            sender=task, task_id=task_id, name=name, kind=task._redislock_kind, reason="revoked"
        )
        capacity = capacity_of(task, task.redislock_limit(args, kwargs))
        promote(task.app, name, capacity, client, settings.prefix, task.name)
    except Exception as exc:  # the deadline frees the slot; the record is what matters
        log.error(
            "%s[%s]: could not give back its park reservation (%r); it lapses at its deadline",
            task.name,
            task_id,
            exc,
        )


def wake_waiting_for(
    app: Any,
    limit: str,
    passed_over: str = "",
    woken: Sequence[Any] | None = None,
    published: list[str] | None = None,
) -> int:
    """After a slot of ``limit`` came back (or might have): wake the first
    name whose parked head waits for it as a listed limit, other than
    ``passed_over`` (``limit_wake.lua`` takes it out of the limit's blocked
    set only while its head would be admitted by its own limit) and promote
    one of its tasks (``park_unhold.lua``).  A name noted as holding (the
    limit's name is the same for every call of its task) is noted again
    behind the others in the same call, and the rest of its parked work is
    held for the limit again (:data:`LISTED_RETRY` at most): so the next
    release that reaches it promotes one more.  If the limit has room for
    one more, the next name is woken (:data:`WAKE_TRIES` times at most; the
    last lifts the hold, so the sweeper promotes the rest); a woken name
    that promotes nothing (its own slots full, its park empty, a hold for
    another limit) does not use the slot up, nor does a promoted task that
    does not list the limit.  Returns the number of tasks published that
    take a slot of it.  ``woken``: the reply of the release that woke the first name
    already (:func:`release_listed`; empty: it woke nobody).  When nothing
    is held again, :func:`_promote_woken` takes back the note the wake-up
    made, and only that one (``limit_forget.lua``): a note another process
    made since (a run of the name refused) stays.

    ``published``: the ids of tasks published for the limit before this
    call, appended to with the ones it publishes; each counts as taking a
    slot until it holds one (``limit_wake.lua`` ARGV[3]), so a task that
    started meanwhile is not counted twice.

    Never raises: an error is logged and the tasks published before it are
    counted, and the holds of the names still waiting end by themselves
    (:data:`LISTED_RETRY`), so whatever release called it goes on."""
    sent = published if published is not None else []
    before = len(sent)
    try:
        client, settings = client_for(app)
        keys = lease_keys(settings.prefix, limit)
        for attempt in range(WAKE_TRIES):
            if woken is None or attempt:
                tags = " ".join(execution_tag(task_id) for task_id in sent)
                woken = LIMIT_WAKE(
                    client,
                    [*keys.lease_keys(), *keys.blocked_keys()],
                    [passed_over, BLOCKED_MEMORY_MS, tags],
                )
            if not woken:
                break
            noted_again = bool(int(woken[2]))
            last = attempt == WAKE_TRIES - 1
            count = _promote_woken(app, text(woken[0]), limit, noted_again, last, sent)
            if count and not int(woken[3]):
                break
    except Exception as exc:
        log.warning("could not wake the names waiting for %r (%r)", limit, exc)
    return len(sent) - before


def wake_changed_limits(app: Any, client: Any, prefix: str) -> int:
    """The sweeper's part of a run-time override of a name that keys wait for
    as a listed limit (``limit_changed.lua`` noted the name): wake the keys
    waiting for each such limit while it has room for them, each task
    published counting as taking a slot until it holds one, so a raised
    limit fills its new slots at once.  Returns the number of tasks
    published."""
    published = 0
    for raw in LIMIT_CHANGED_TAKE(client, [limits_to_wake(prefix)], [100]):
        limit, sent = text(raw), list[str]()
        for _ in range(_MOST_WOKEN_PER_CHANGE):
            if not wake_waiting_for(app, limit, published=sent):
                break
        published += len(sent)
    return published


#: at most this many wake-ups per changed limit in one sweep (a limit raised
#: by more leaves the rest to its releases and the holds' end)
_MOST_WOKEN_PER_CHANGE = 1000


def release_listed(
    lease_set: LeaseSet, woken: list[Any], handed_at: list[int] | None = None
) -> None:
    """The release of a run's lease of a listed limit (through
    ``LeaseSet.release_through``, so it raises as ``LeaseSet.release``
    does): the slot is given back and the first name waiting for the limit
    is woken in one call (``limit_release.lua``); its
    reply is left in ``woken`` for :func:`wake_waiting_for` (empty: nobody),
    and the Redis time of the release (us) in ``handed_at``: when a woken
    name was noted again (a run that makes way is noted just before it)."""

    def release(owner: str) -> bool:
        keys = lease_set.keys
        reply = LIMIT_RELEASE(
            lease_set.client,
            [*keys.lease_keys(), *keys.blocked_keys(), *keys.script_keys()[7:]],
            [owner, WAIT_LEASE_MS, BLOCKED_MEMORY_MS],
        )
        woken[:] = reply[2:]
        if handed_at is not None:
            handed_at[:] = [int(reply[1])]
        return bool(int(reply[0]))

    lease_set.release_through(release)


def _promote_woken(
    app: Any, name: str, limit: str, noted_again: bool, last: bool, sent: list[str]
) -> int:
    """Lift ``name``'s hold for ``limit`` and promote one of its tasks; when
    ``limit_wake.lua`` noted it again, hold the rest for the limit again
    (not on the ``last`` try), or take the note back if nothing is held.
    Returns the number of tasks published that take a slot of ``limit``,
    whose ids it appends to ``sent``: a task of the name that does not list
    the limit (another task type of the key) runs, but leaves the slot to
    the next name (:func:`wake_waiting_for` goes on)."""
    client, settings = client_for(app)
    parking = Parking(client, settings.prefix, name)
    hold = LISTED_RETRY if noted_again and not last else 0.0
    promotions, held_again = parking.unhold(settings.park, limit, hold, STATES_SEEN[app])
    mine: list[str] = []
    try:
        _publish_all(app, parking, promotions, None, sent=mine)
    finally:  # what was published before an error counts (see wake_waiting_for)
        takers = _taking(app, limit, promotions, mine)
        sent.extend(takers)
    if noted_again and not held_again:
        # limit_forget.lua takes back only the note the wake-up made: one
        # limit_block.lua made since (a run of the name refused) stays.
        keys = lease_keys(settings.prefix, limit)
        try:
            LIMIT_FORGET(client, keys.blocked_keys(), [name, BLOCKED_MEMORY_MS])
        except RedisError as exc:  # a stale note costs a wake-up that promotes nothing
            log.warning("could not take back the note of %r on %r (%r)", name, limit, exc)
    return len(takers)


def _taking(app: Any, limit: str, promotions: Sequence[Promotion], ids: Sequence[str]) -> list[str]:
    """The tasks of ``ids`` (published from ``promotions``) whose run takes a
    slot of the listed limit ``limit``: not another task type of the key
    that does not list it.  A task that cannot be told (promoted in a later
    round, unknown to this app, a message that does not decode, a key that
    fails to build) counts as taking one."""
    envelopes = {p.task_id: p.envelope for p in promotions}
    return [i for i in ids if i not in envelopes or _lists(app, envelopes[i], limit)]


def _lists(app: Any, envelope: str, limit: str) -> bool:
    """Whether the task of a stored message lists ``limit`` among its
    ``limits=`` (only the keys are built: no limit or rate callable runs;
    the message's arguments are decoded only for a templated limit)."""
    try:
        stored = json_loads(envelope)
        task = app.tasks.get(stored.get("task") or "")
        listed = getattr(type(task), "_redislock_listed", None)
        if listed is None:
            return True
        fixed = [each.fixed_name for each in listed]
        if limit in fixed or None not in fixed:
            return limit in fixed
        request = request_of(stored)
        if request is None:
            return True
        args, kwargs = request.args or (), request.kwargs or {}
        return any(each.keys.build(args, kwargs) == limit for each in listed)
    except Exception:
        return True


def wake_name(app: Any, name: str, limit: str, asks: int | None = None, in_flight: int = 0) -> bool:
    """Lift ``name``'s hold for the listed limit ``limit`` and promote one of
    its parked tasks (``park_unhold.lua``), for a name found with room when
    it was to be noted (:func:`note_blocked`); returns whether a task was
    published.  With ``asks`` (the limit its head asks of ``limit``), the
    rest of its parked work stays held for the limit (:data:`LISTED_RETRY`
    at most) and the name is noted behind the names waiting for it (counting
    the tasks promoted and ``in_flight`` as taking their slots): so the next
    release that reaches it promotes one more, and if the limit has room
    for one more now, one more is promoted at once (:data:`WAKE_TRIES`
    times at most; the last lifts the hold, so the sweeper promotes the rest).
    A promotion dropped because its task was revoked meanwhile does not
    count as taking a slot: the next task is promoted instead (one whose
    publish failed stays reserved and counts)."""
    client, settings = client_for(app)
    parking = Parking(client, settings.prefix, name)
    published = 0
    for attempt in range(WAKE_TRIES):
        last = attempt == WAKE_TRIES - 1
        hold = LISTED_RETRY if asks is not None and not last else 0.0
        promotions, held_again = parking.unhold(settings.park, limit, hold, STATES_SEEN[app])
        ids: list[str] = []
        sent = _publish_all(app, parking, promotions, None, sent=ids)
        published += sent
        if asks is None or not held_again:
            break
        if not sent and all(parking.is_revoked(p.task_id) for p in promotions):
            continue  # dropped as revoked: the slot is still free, promote the next one
        # A failed publish stays reserved (re-published after its deadline): it
        # counts; a task of the name that does not list the limit does not.
        in_flight += len(_taking(app, limit, promotions, ids)) if sent else 1
        if note_blocked(
            client, settings.prefix, name, limit, asks, in_flight, holds=True, turn=WOKEN_NOW
        ):
            break
    return published > 0


def note_blocked(
    client: Any,
    prefix: str,
    name: str,
    limit: str,
    asks: int,
    in_flight: int = 0,
    holds: bool = False,
    turn: int = 0,
) -> bool:
    """Note ``name`` in the listed limit ``limit``'s blocked set with the
    limit its head asks of it (``asks``; ``limit_block.lua``), unless the
    limit has room for that head now and no name is queued or noted before
    it; returns whether it was noted (False: the caller wakes it).  The
    check and the note are one script call, so a release of the limit
    either comes before it (and the check sees the slot) or after it (and
    wakes the first noted name it has room for).  ``in_flight``: slots of
    the limit to count as taken besides its holders (tasks just promoted
    for it, on their way to take them).  ``holds``: when woken, the name's
    other parked tasks stay held for the limit (its name is the same for
    every call of the name's task).  Names are served in rounds: a name
    that has not had a turn of the limit in the current round is noted
    before every name that had one; ``turn`` (:data:`WOKEN_NOW`: it was
    just woken and promoted; a Redis time in us: a run of it handed its
    slot on then, it makes way) notes it at the back
    (``includes/place_in_blocked.lua``)."""
    keys = lease_keys(prefix, limit)
    noted = LIMIT_BLOCK(
        client,
        [*keys.lease_keys(), *keys.blocked_keys()],
        [name, asks, BLOCKED_MEMORY_MS, in_flight, int(holds), turn],
    )
    return bool(int(noted))


#: ``note_blocked``'s ``turn`` of a name just woken and promoted
WOKEN_NOW = -1
#: how long a name's parked work is held for a listed limit when nothing
#: lifts the hold first: after a full limit sent its head back (a release of
#: the limit wakes it; a holder that died where no process sees it frees by
#: its ttl), and after a wake-up promoted one task (the name is noted again:
#: the next release of the limit that reaches it promotes one more)
LISTED_RETRY = 5.0
#: how long a limit's blocked set outlives its last note (a noted name whose
#: hold ended is promoted by the sweeper anyway)
BLOCKED_MEMORY_MS = 3_600_000


#: names woken at most per :func:`wake_waiting_for` (each that promoted
#: nothing lets the next one try; the rest wait for the next release or their hold)
WAKE_TRIES = 10


def release_dead_holders(app: Any, own_children: Collection[int] = ()) -> int:
    """Give back the leases of processes of this machine that are provably dead
    (see core/liveness.py: a whole worker killed, whose main process could not
    clean up after its children), and promote parked work into the freed slots,
    before the leases' TTL would have freed them.  ``own_children`` (pids of
    this worker's pool children) are left to its own clean-up (run/request.py),
    which also sends ``lock_released``.  A process whose clean-up fails (a
    Redis error) is logged and its statement kept: the next pass tries it
    again, and the other dead processes are cleaned up meanwhile.
    Returns how many it released (but for a clean-up that failed midway)."""
    client, settings = client_for(app)
    released = 0
    for dead in liveness.dead_processes(client, settings.prefix):
        if _pid_of(dead.process) in own_children:
            continue  # this worker's own child: its clean-up releases and signals
        try:
            released += _give_back_dead(app, client, settings, dead)
        except Exception as exc:  # its statement stays: the next pass tries it again
            log.warning("could not give back what dead process %s held (%r)", dead.process, exc)
            continue
        liveness.forget(client, settings.prefix, dead.process)
    return released


def _give_back_dead(app: Any, client: Any, settings: Any, dead: liveness.DeadProcess) -> int:
    """Release every lease ``dead`` held, then publish what the releases
    promoted and wake the keys waiting for its names; returns how many it
    released.  Every name is given back before any promotion is published or
    key woken: a task promoted for one name (its own key) may need another
    (a listed limit the dead process also held).  What was given back is
    published and woken even when a later release fails (the error is then
    raised); a failed publish is logged (the task stays reserved, and is
    published again after its deadline)."""
    released = 0
    freed: list[tuple[str, Parking, list[Promotion]]] = []
    try:
        for name, owners in dead.holdings.items():
            parking = Parking(client, settings.prefix, name)
            for owner in owners:
                held, promotions = parking.release(owner, None, settings.park)
                if held:
                    released += 1
                    log.warning(
                        "released %r held by process %s, which died on this machine (owner %s)",
                        name,
                        dead.process,
                        owner,
                    )
                freed.append((name, parking, promotions))
    finally:
        for name, parking, promotions in freed:
            try:
                _publish_all(app, parking, promotions, None)
            except Exception as exc:
                log.warning("could not publish what the release of %r promoted (%r)", name, exc)
            wake_waiting_for(app, name)
    return released


def _pid_of(process: str) -> int:
    """The pid of a process id ``"<pid>.<start time>"`` (core/liveness.py)."""
    head = process.split(".", 1)[0]
    return int(head) if head.isdigit() else -1
