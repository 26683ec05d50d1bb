"""Taking a slot of a lease set: admission, blocking and waiting.

:class:`LeaseSetAdmission` is the part of
:class:`~celery_redislock.core.leaseset.LeaseSet` that acquires:
``acquire()`` and ``adopt()``, with the waiting, the receipt of a hand-off
and the replica check behind them.

Guaranteed:

* admission is decided inside ``acquire.lua`` (one atomic call): a caller is
  granted only while THE INVARIANT of ``lua/common.lua`` allows it and no
  live waiter queued before it still waits, so newcomers never barge past
  the queue;
* a blocking acquire that is not granted has joined the queue in that same
  call and blocks on its own wake list (``BLPOP``), never longer than the
  script's retry time (the earliest holder's lease, at most half a wait
  lease), the caller's deadline, or 0.8 of the client's socket timeout;
* on True the lease runs at least ``ttl`` from the grant (a slot handed over
  after a long wait is renewed once on receipt) and the heartbeat renews it;
* a blocking acquire that gives up (timeout, an exception, a
  ``KeyboardInterrupt``) leaves the queue and passes on a slot handed to it
  meanwhile; if Redis cannot be reached then, its queue entry lapses by
  itself at most one wait lease after its last request (a slot handed to
  it, within its ttl);
* with ``replicas=N``, a lease that fewer than N replicas acknowledge in
  time is given back before ``NotReplicated`` is raised.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from types import EllipsisType
from typing import Any

from .errors import LockError, NotReplicated
from .keys import LeaseKeys
from .lease import Lease, LostCallback
from .leaseset_inspect import LeaseSetInspection
from .leaseset_release import LeaseSetRelease
from .owners import new_owner
from .replication import acknowledged_by
from .scripts import ACQUIRE
from .validation import check_timeout

__all__ = ["LeaseSetAdmission"]


def _socket_timeout(client: Any) -> float | None:
    # redis.Redis (also Sentinel's master_for): its pool; RedisCluster: its nodes manager.
    holder = getattr(client, "connection_pool", None) or getattr(client, "nodes_manager", None)
    value = getattr(holder, "connection_kwargs", {}).get("socket_timeout")
    return float(value) if value else None


class LeaseSetAdmission(LeaseSetRelease, LeaseSetInspection):
    """Acquisition of a slot: at once, or waiting in FIFO order for a hand-off."""

    # Set by LeaseSet.__init__.
    keys: LeaseKeys
    ttl: float
    owner_prefix: str
    blocking_timeout: float | None
    replicas: int
    replica_timeout: float
    _on_lost: tuple[LostCallback, ...]

    def acquire(
        self, blocking: bool | None = None, timeout: float | EllipsisType | None = ...
    ) -> bool:
        """Take a slot; True on success.

        ``blocking=False``: one attempt.  ``blocking=True``: wait in FIFO
        order, woken by a release, for at most ``timeout`` seconds (None:
        forever).  Left out, both follow ``blocking_timeout`` as ``with``
        does (and as redis-py's ``Lock.acquire`` does): ``blocking`` is
        ``blocking_timeout != 0`` and ``timeout`` is ``blocking_timeout``
        (a ``blocking_timeout`` of 0 only means "do not wait by default":
        ``acquire(blocking=True)`` then waits forever).

        On True the lease runs at least ``ttl`` from the grant (a slot handed
        over after a long wait is renewed on receipt).  Raises
        :class:`LockError` if this instance already holds a lease, and Redis
        errors as they are (nothing is held then).
        """
        if blocking is None:
            blocking = self.blocking_timeout != 0
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
                popped = self.client.blpop([self.keys.wake(owner)], timeout=max(block, 0.001))
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
