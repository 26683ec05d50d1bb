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

The class is split by concern: acquiring and waiting in
:mod:`.leaseset_acquire`, release, hand-off and renewal in
:mod:`.leaseset_release`, reading holders and waiters in
:mod:`.leaseset_inspect`; this module builds and validates an instance and
holds its state.  Import from this module: it also provides ``Holder``,
``Waiter``, ``parse_inspect`` and ``WAIT_LEASE``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any, TypeVar

from .errors import AcquireTimeout, Superseded
from .heartbeat import HEARTBEAT, Heartbeat, is_cluster
from .keys import DEFAULT_PREFIX, SUPERSEDED_FIELD, LeaseKeys, validate_name, validate_prefix
from .lease import Lease, LostCallback
from .leaseset_acquire import LeaseSetAdmission
from .leaseset_inspect import Holder, Waiter, parse_inspect
from .owners import HOSTNAME
from .scripts import text
from .validation import check_timeout, check_ttl

__all__ = ["WAIT_LEASE", "Holder", "LeaseSet", "Waiter", "parse_inspect"]

WAIT_LEASE = 5.0

Self = TypeVar("Self", bound="LeaseSet")


def _check_client(client: object) -> Any:
    if not callable(getattr(client, "evalsha", None)) or not callable(
        getattr(client, "blpop", None)
    ):
        raise TypeError(
            f"client must be a redis-py client (redis.Redis or RedisCluster), got {client!r}"
        )
    return client


class LeaseSet(LeaseSetAdmission):
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

    #: a fixed limit is one no run-time override changes (a lock's); see
    #: :attr:`script_limit` and :mod:`celery_redislock.core.override`
    fixed_limit: bool = False

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
        self.client = _check_client(client)
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
        self.keys = LeaseKeys(validate_prefix(prefix), self.name, indexed)
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
        self._script_keys: list[bytes] = [k.encode() for k in self.keys.script_keys()]
        self._constant_args = tuple(
            str(n).encode()
            for n in (self.script_limit, int(self.ttl * 1000), int(WAIT_LEASE * 1000))
        )
        self._lease: Lease | None = None

    @property
    def script_limit(self) -> int:
        """The limit as the scripts take it: negative when fixed (see
        ``limit_of()`` in common.lua), so a run-time override of the name
        changes a semaphore's limit and never a lock's."""
        return -self.limit if self.fixed_limit else self.limit

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
