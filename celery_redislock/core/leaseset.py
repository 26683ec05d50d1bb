"""The primitive under both :class:`RedisLock` and :class:`FairSemaphore`.

A *lease set* is up to ``limit`` holders of one name, each with a lease that
expires by Redis time unless renewed, plus a FIFO queue of waiters.  A lock
is a lease set with ``limit=1``.

The invariant, whatever limits different callers pass for the same name:
**no holder ever shares its name with more holders than its own limit
allows** (a lock holder is always alone).  Each holder's and waiter's limit
is stored with it in Redis; a caller is admitted only while the holders are
fewer than its own limit and fewer than every current holder's limit, and
waiters are promoted each by its own limit, in arrival order.  So a
``RedisLock("x")`` and a ``FairSemaphore("x", 5)`` exclude each other as
the lock requires, and lowering a name's limit (say from 5 to 2 while five
hold) is safe at once: callers with the lower limit wait until fewer than 2
hold; holders already in keep their slots.

How waiting works: a blocking ``acquire`` that is not granted joins the queue
in the same script call, then blocks on its own wake list (``BLPOP``).  A
release hands the freed slot directly to the first live waiter (it becomes
the holder inside the release script) and pushes the fencing token onto that
waiter's wake list; the waiter returns without another request.  So under
contention an acquisition costs three commands (acquire, BLPOP, release) and
no polling, and newcomers cannot barge past the queue.

A waiter never sleeps past the earliest holder's lease: it blocks at most
until the earliest lease it saw would expire, and a hand-off that creates a
holder with an earlier expiry (e.g. to a waiter with a short ttl) tells the
next waiter to ask again.  So a holder that dies without releasing, a waiter
that dies after being handed a slot, or a lost wake-up delays the next
waiter by at most that lease.  Queue entries live ``min(WAIT_LEASE,
max(ttl, 1 s))`` and are renewed by asking again at least every half of
that; a waiter that dies while queued drops out then and is skipped by
hand-offs.

A lease handed over after a long wait is renewed once on receipt (one
request, only when the wait since the last request exceeded ttl/3), so a
waiter that returns True from ``acquire()`` owns a full ttl from then on.

Not guaranteed: exclusion against a holder that stalled past its ttl (see
:class:`~celery_redislock.RedisLock`).

``index=True`` lists the name in the index of held names
(:func:`~celery_redislock.core.keys.held_index`) at every grant and renewal,
one ``ZADD`` each (and one ``ZREM`` by the release that leaves it without
holders), so that ``celery redislock exporter`` can count the slots
in use and the keys at their limit without scanning the keyspace.  The
Celery layer sets it; on a cluster it is ignored (the index lives in another
slot) and those two gauges are not served.

Guaranteed, acquiring:

* admission is decided inside ``acquire.lua`` (one atomic call): a caller is
  granted only while THE INVARIANT of ``lua/includes/lease_set_keys.lua`` allows it and no
  live waiter queued before it still waits, so newcomers never barge past
  the queue;
* a blocking acquire that is not granted has joined the queue in that same
  call and blocks on its own wake list (``BLPOP``), never longer than the
  script's retry time (the earliest holder's lease, at most half a wait
  lease), the caller's deadline, or 0.8 of the client's socket timeout; a
  ``BLPOP`` that fails on a timeout or a dropped connection (Redis stalled
  meanwhile) is followed by asking again, which fails if Redis still does
  not answer;
* on True the lease runs at least ``ttl`` from the grant (a slot handed over
  after a long wait is renewed once on receipt) and the heartbeat renews it;
* a blocking acquire that gives up (timeout, an exception, a
  ``KeyboardInterrupt``) leaves the queue and passes on a slot handed to it
  meanwhile; if Redis cannot be reached then, its queue entry lapses by
  itself at most one wait lease after its last request (a slot handed to
  it, within its ttl);
* with ``replicas=N``, a lease that fewer than N replicas acknowledge in
  time is given back before ``NotReplicated`` is raised.

Guaranteed, releasing and renewing:

* a release is one ``release.lua`` call, which hands the freed slot directly
  to the first live waiter(s), each admitted by its own limit, in arrival
  order (see ``lua/includes/lease_set_keys.lua``): the waiter becomes the holder inside that
  call, so no newcomer can take the slot in between;
* after ``release()`` / ``release_through()`` the instance holds nothing,
  whether or not the lease was still held in Redis (``LockLost`` says it was
  not); the heartbeat stops renewing the lease before Redis is asked;
* ``refresh()`` never revives an expired lease: a lease found gone is marked
  lost and forgotten.

One class, as redis-py's ``Lock`` is: its state, acquiring and waiting,
release and renewal, reading holders and waiters.  What Redis says about
holders and waiters (``Holder``, ``Waiter``, ``parse_inspect``) is in
:mod:`.holders`; one held lease is :class:`~.lease.Lease`.
"""

from __future__ import annotations

import contextlib
import json
import time
import weakref
from collections.abc import Callable, Mapping
from types import EllipsisType, TracebackType
from typing import Any, ClassVar, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .capacity import Capacity, Kind
from .errors import AcquireTimeout, LockError, LockLost, NotOwned, NotReplicated, Superseded
from .heartbeat import HEARTBEAT, Heartbeat, is_cluster
from .holders import Holder, Waiter, parse_inspect
from .keys import (
    DEFAULT_PREFIX,
    SUPERSEDED_FIELD,
    lease_keys,
    validate_name,
    validate_prefix,
)
from .lease import Lease, LostCallback
from .liveness import holder_fields
from .owners import HOSTNAME, new_owner
from .replication import acknowledged_by
from .scripts import ACQUIRE, INSPECT, RELEASE, text
from .validation import check_client, check_timeout, check_ttl

__all__ = ["WAIT_LEASE", "Holder", "LeaseSet", "Waiter", "parse_inspect"]

WAIT_LEASE = 5.0

Self = TypeVar("Self", bound="LeaseSet")


#: seconds between a failed BLPOP and asking again
_BLPOP_RETRY_PAUSE = 0.1


def _socket_timeout(client: Any) -> float | None:
    # redis.Redis (also Sentinel's master_for): its pool; RedisCluster: its nodes manager.
    holder = getattr(client, "connection_pool", None) or getattr(client, "nodes_manager", None)
    value = getattr(holder, "connection_kwargs", {}).get("socket_timeout")
    return float(value) if value else None


class LeaseSet:
    """Up to ``limit`` concurrent holders of ``name``; see the module docstring.

    An instance holds at most one lease at a time.  The lease belongs to the
    instance, not to a thread: it may be released from another thread.  Use
    one instance per concurrent holder.

    The heartbeat renews the lease only while this instance is reachable: if
    it is garbage-collected while held (``release()`` never called), renewal
    stops with a warning naming the lock, and the lease expires within its
    ttl.  (An ``on_lost`` callback that refers to the instance keeps it
    reachable, as the heartbeat holds the callbacks.)
    """

    _default_blocking_timeout: float | None = None

    #: what the set is: ``"semaphore"`` (a run-time override of the name
    #: changes its limit) or ``"lock"`` (fixed: one holder, whatever an
    #: override says); see :mod:`celery_redislock.core.capacity`
    kind: ClassVar[Kind] = "semaphore"

    #: the heartbeat that renews this set's leases: one per process, shared by
    #: every lease set; a test (or an embedding) may give a subclass or an
    #: instance a ``Heartbeat()`` of its own.
    renewer: Heartbeat = HEARTBEAT

    def __init__(
        self,
        client: Any,
        name: str,
        limit: int,
        *,
        ttl: float = 30.0,
        prefix: str = DEFAULT_PREFIX,
        blocking_timeout: float | object | None = ...,
        on_lost: LostCallback | None = None,
        meta: Mapping[str, Any] | None = None,
        owner_prefix: str = "",
        replicas: int = 0,
        replica_timeout: float = 1.0,
        index: bool = False,
    ) -> None:
        self.client = check_client(client)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ValueError(f"replicas must be an int >= 0, got {replicas!r}")
        self.replicas = replicas
        self.replica_timeout = check_ttl(replica_timeout, "replica_timeout")
        if not isinstance(owner_prefix, str) or ":" in owner_prefix:
            raise ValueError(f"owner_prefix must be a str without ':', got {owner_prefix!r}")
        self.owner_prefix = owner_prefix
        self.name = validate_name(name)
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit must be an int, got {type(limit).__name__}: {limit!r}")
        if limit <= 0:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.ttl = check_ttl(ttl)
        if not isinstance(index, bool):
            raise TypeError(f"index must be a bool, got {index!r}")
        indexed = index and not is_cluster(self.client)
        self.keys = lease_keys(validate_prefix(prefix), self.name, indexed)
        self.blocking_timeout = (
            self._default_blocking_timeout
            if blocking_timeout is ...
            else check_timeout(blocking_timeout, "blocking_timeout")
        )
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, got {on_lost!r}")
        self._on_lost: tuple[LostCallback, ...] = (on_lost,) if on_lost else ()
        try:
            meta_json = json.dumps(dict(meta or {}), sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"meta must be JSON-serialisable: {exc}") from exc
        # holder meta is this JSON object plus host and process (per acquire: forks)
        separator = ", " if meta_json != "{}" else ""
        self._meta_head = f'{meta_json[:-1]}{separator}"host": {json.dumps(HOSTNAME)}, '
        # Encoded once: every script call sends these, and encoding is a
        # visible share of an uncontended acquire/release cycle.
        self._script_keys = self.keys.encoded_script_keys
        #: the kind and limit of this set, as the scripts take them
        #: (:attr:`Capacity.encoded`): a run-time override of the name changes a
        #: semaphore's limit and never a lock's
        self.capacity = Capacity.lock() if self.kind == "lock" else Capacity.semaphore(limit)
        self._constant_args = (
            str(self.capacity.encoded).encode(),
            str(int(self.ttl * 1000)).encode(),
            str(int(WAIT_LEASE * 1000)).encode(),
        )
        self._lease: Lease | None = None

    # -- state --------------------------------------------------------------

    @property
    def lease(self) -> Lease | None:
        """The current lease, or None."""
        return self._lease

    @property
    def token(self) -> int | None:
        """Fencing token of the current lease: strictly greater than every
        token handed out for this name before.  None when not held."""
        return self._lease.token if self._lease is not None else None

    def owned(self) -> bool:
        """Whether this instance holds an unexpired lease, as far as it knows.

        Local and free while renewals are confirmed: the heartbeat turns it
        False within one interval of Redis losing the lease.  Once the TTL has
        passed since the last renewal this process saw confirmed, it asks
        Redis (one renewal, see :meth:`Lease.recheck`): the lease may have
        been renewed by another process (a Celery worker's main process
        renews its children's).
        """
        return self._lease is not None and (not self._lease.lost or self._lease.recheck())

    @property
    def superseded(self) -> bool:
        """Whether a newer call of the name superseded this holder
        (``lock_supersede``), as the last renewal told (the heartbeat's, within
        ``ttl / 3``).  :meth:`checkpoint` asks Redis now."""
        return self._lease is not None and self._lease.superseded

    def checkpoint(self) -> None:
        """Raise :class:`~celery_redislock.core.errors.Superseded` if a newer call
        of the name superseded this holder (one ``HMGET``; a place in a long
        run where stopping is safe).  Does nothing when not held."""
        lease = self._lease
        if lease is None:
            return
        entry, mark = self.client.hmget(self.keys.info, lease.owner, SUPERSEDED_FIELD)
        if mark is not None and entry is not None:
            bound, _, by = text(mark).partition("|")
            if int(text(entry).split(":", 1)[0]) <= int(bound):
                lease.superseded = True
                raise Superseded(self.name, by)
        if lease.superseded:
            raise Superseded(self.name)

    # -- acquiring and waiting ---------------------------------------------
    def acquire(
        self, blocking: bool | None = None, timeout: float | EllipsisType | None = ...
    ) -> bool:
        """Take a slot; True on success.

        ``blocking=False``: one attempt.  ``blocking=True``: wait in FIFO
        order, woken by a release, for at most ``timeout`` seconds (None:
        forever).  ``blocking`` left out and a ``timeout`` given: wait that
        long (``FairSemaphore(...).acquire(timeout=3)`` waits 3 s, as
        ``threading.Semaphore.acquire(timeout=3)`` does).  Both left out,
        they follow ``blocking_timeout`` as ``with`` does (and as redis-py's
        ``Lock.acquire`` does): ``blocking`` is ``blocking_timeout != 0`` and
        ``timeout`` is ``blocking_timeout`` (a ``blocking_timeout`` of 0 only
        means "do not wait by default": ``acquire(blocking=True)`` then waits
        forever).

        On True the lease runs at least ``ttl`` from the grant (a slot handed
        over after a long wait is renewed on receipt).  Raises
        :class:`LockError` if this instance already holds a lease, and Redis
        errors as they are (nothing is held then).
        """
        if blocking is None:
            # a timeout given asks to wait that long, as threading's does
            blocking = timeout is not ... or self.blocking_timeout != 0
        if timeout is ...:
            timeout = self.blocking_timeout if blocking and self.blocking_timeout != 0 else None
        else:
            timeout = check_timeout(timeout, "timeout")
            if timeout is not None and not blocking:
                raise ValueError("timeout applies to blocking acquires only")
        if self._lease is not None:
            if not self._lease.lost:
                raise LockError(f"this object already holds {self.name!r}; release it first")
            self._forget()
        owner = new_owner(self.owner_prefix)
        meta = self.holder_meta()
        limit, ttl_ms, wait_ms = self._constant_args
        args = [owner, limit, ttl_ms, meta, b"1" if blocking else b"0", wait_ms]
        keys = self._script_keys
        deadline = None if timeout is None else time.monotonic() + timeout
        cap = _socket_timeout(self.client) if blocking else None
        try:
            while True:
                sent_at = time.monotonic()
                reply = ACQUIRE(self.client, keys, args)  # token, or -retry_in_ms
                if reply > 0:
                    return self._hold(self._new_lease(owner, reply, sent_at))
                if not blocking:
                    return False
                block = -reply / 1000  # the script caps it at half the wait lease
                if deadline is not None:
                    block = min(block, deadline - time.monotonic())
                    if block <= 0:
                        self._abandon(owner)
                        return False
                if cap is not None:
                    block = min(block, cap * 0.8)
                try:
                    popped = self.client.blpop([self.keys.wake(owner)], timeout=max(block, 0.001))
                except (RedisConnectionError, RedisTimeoutError):
                    # A stall or a dropped connection while it waited: it holds
                    # nothing, and a hand-off made meanwhile shows as its own
                    # when it asks again; a Redis still down fails that ask.
                    # (A pause first: a BLPOP that fails at once must not spin.)
                    time.sleep(_BLPOP_RETRY_PAUSE)
                    continue
                if popped is None:
                    continue
                token = int(popped[1])
                if token <= 0:
                    continue  # a nudge: a holder's lease ends sooner than we planned to ask
                lease = self._new_lease(owner, token, sent_at)
                if self._confirm_handoff(lease):
                    return self._hold(lease)
        except BaseException:
            if blocking:
                self._abandon_quietly(owner)
            raise

    def adopt(self, owner: str, token: int, sent_at: float) -> bool:
        """Hold a lease another script granted to ``owner`` (e.g. the park policy's claim).

        ``sent_at`` is ``time.monotonic()`` when that script call was sent:
        the local deadline counts from it.  The heartbeat renews it from now on.
        """
        return self._hold(self._new_lease(owner, token, sent_at))

    def _new_lease(self, owner: str, token: int, sent_at: float) -> Lease:
        """A lease granted by a request sent at ``sent_at`` (or after it)."""
        return Lease(
            self.client,
            self.keys,
            owner,
            token,
            self.ttl,
            sent_at + self.ttl,
            self._on_lost,
            handle=weakref.ref(self),
        )

    def _confirm_handoff(self, lease: Lease) -> bool:
        """Make a handed-over lease's local deadline count from about now.

        The hand-off happened at some moment after the last acquire request
        was sent, which is all the waiter knows; after a long wait that bound
        may leave little or nothing of the ttl.  Then one renewal (which never
        revives an expired lease) moves the deadline to now + ttl.  False if
        the lease expired before the waiter got to it (it was stalled past
        the ttl): the caller then asks again.
        """
        if time.monotonic() - (lease.valid_until - lease.ttl) <= lease.ttl / 3:
            return True
        sent_at = time.monotonic()
        if lease.renew() <= 0:
            return False
        lease.confirm(sent_at)
        return True

    def _hold(self, lease: Lease) -> bool:
        self._lease = lease
        self.renewer.add(lease)
        if self.replicas:
            self._await_replicas(lease.owner)
        return True

    def _await_replicas(self, owner: str) -> None:
        """Give the lease back unless ``replicas`` replicas acknowledge it (see replication.py)."""
        timeout_ms = max(1, int(self.replica_timeout * 1000))
        try:
            acked = acknowledged_by(self.client, self.keys.fence, self.replicas, timeout_ms)
        except BaseException:
            self._forget()
            self._abandon_quietly(owner)
            raise
        if acked < self.replicas:
            self._forget()
            self.release_owner(owner)
            raise NotReplicated(
                f"acquired {self.name!r} on the primary, but only {acked} of the "
                f"{self.replicas} replicas asked for acknowledged it within "
                f"{self.replica_timeout} s; released it again"
            )

    def _abandon(self, owner: str) -> None:
        """Leave the queue; a slot handed to us meanwhile is passed on."""
        self.release_owner(owner)

    def _abandon_quietly(self, owner: str) -> None:
        # Redis unreachable: the queue entry lapses by itself.
        with contextlib.suppress(Exception):
            self._abandon(owner)

    # -- release and renewal -----------------------------------------------
    def release(self) -> None:
        """Give the slot back (handing it to the next waiter).

        Raises :class:`NotOwned` if this instance holds nothing, and
        :class:`LockLost` if the lease had expired or been taken meanwhile.
        Either way the instance holds nothing afterwards.
        """
        self.release_through(
            lambda owner: bool(RELEASE(self.client, self._script_keys, self._release_args(owner)))
        )

    def release_through(self, release: Callable[[str], bool]) -> None:
        """:meth:`release`, with the Redis call made by ``release(owner)``,
        which returns True if ``owner`` held an unexpired slot.

        For a caller whose release script does more in the same round trip
        (the park policy's release also promotes parked work); it must give
        the slot back as ``release.lua`` does.
        """
        lease = self._lease
        if lease is None:
            raise NotOwned(f"release() of {self.name!r}, which this object does not hold")
        self._forget()
        held = release(lease.owner)
        if not held:
            raise LockLost(
                f"lease on {self.name!r} (fencing token {lease.token}) expired or was taken "
                "before release",
                reported=lease.reported_lost,
            )

    def refresh(self, ttl: float | None = None) -> bool:
        """Renew the lease to ``ttl`` (default: the instance's ttl) from now.

        True if renewed.  False if the lease was already gone (it is then
        marked lost and the instance holds nothing); an expired lease is
        never revived.  Raises :class:`NotOwned` if nothing is held.
        """
        lease = self._lease
        if lease is None:
            raise NotOwned(f"refresh() of {self.name!r}, which this object does not hold")
        if ttl is not None:
            lease.ttl = check_ttl(ttl)
            self.renewer.add(lease)  # renew at the new pace from now on
        sent_at = time.monotonic()
        if lease.renew() > 0:
            lease.confirm(sent_at)
            return True
        lease.mark_lost("gone at refresh: expired, deleted, or Redis lost its data")
        self._forget()
        return False

    def release_owner(self, owner: str) -> bool:
        """Release the slot (or queue place) of ``owner``, whoever holds it locally.

        For cleaning up after a holder that cannot release itself (a worker
        child killed mid-task).  True if ``owner`` held an unexpired slot.
        """
        return bool(RELEASE(self.client, self._script_keys, self._release_args(owner)))

    def _release_args(self, owner: str) -> list[Any]:
        wait_ms = self._constant_args[2]
        return [owner, wait_ms]

    def _forget(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.close()
            self.renewer.discard(lease)

    # -- reading ----------------------------------------------------------
    def holder_meta(self) -> str:
        """The holder meta (JSON) an acquisition by this process stores: the
        ``meta`` given, ``host``, ``pid`` and ``proc`` (see liveness.holder_fields)."""
        return f"{self._meta_head}{holder_fields()}}}"

    def holders(self) -> list[Holder]:
        """Current unexpired holders, from Redis."""
        return parse_inspect(INSPECT(self.client, self._script_keys, []))[1]

    def waiters(self) -> list[Waiter]:
        """Live queued waiters in arrival order, from Redis."""
        return parse_inspect(INSPECT(self.client, self._script_keys, []))[2]

    def holders_and_waiters(self) -> tuple[list[Holder], list[Waiter]]:
        """Both, from one read of Redis."""
        _, holders, waiters = parse_inspect(INSPECT(self.client, self._script_keys, []))
        return holders, waiters

    # -- context manager ----------------------------------------------------

    def __enter__(self: Self) -> Self:
        if not self.acquire():
            raise AcquireTimeout(
                f"could not acquire {self.name!r} within {self.blocking_timeout} s"
                if self.blocking_timeout != 0
                else f"{self.name!r} is at its limit of {self.limit}"
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = f"token={self.token}" if self._lease is not None else "not held"
        return f"<{type(self).__name__} {self.name!r} limit={self.limit} {state}>"
