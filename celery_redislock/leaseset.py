"""The primitive under both :class:`RedisLock` and :class:`FairSemaphore`.

A *lease set* is up to ``limit`` holders of one name, each with a lease that
expires by Redis time unless renewed, plus a FIFO queue of waiters.  A lock
is a lease set with ``limit=1``.

How waiting works: a blocking ``acquire`` that is not granted joins the queue
in the same script call, then blocks on its own wake list (``BLPOP``).  A
release hands the freed slot directly to the first live waiter (it becomes
the holder inside the release script) and pushes the fencing token onto that
waiter's wake list; the waiter returns without another request.  So under
contention an acquisition costs three commands (acquire, BLPOP, release) and
no polling, and newcomers cannot barge past the queue.

A waiter never blocks longer than the earliest holder's remaining lease, so
a holder that dies without releasing (no hand-off) or a lost wake-up delays
it by at most that lease.  Queue entries live ``WAIT_LEASE`` seconds and are
renewed while the waiter waits; a waiter that dies while queued drops out
after that (if a slot is handed to it first, the slot frees after its TTL
like any crashed holder's).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from .errors import AcquireTimeout, LockError, LockLost, NotOwned, NotReplicated
from .heartbeat import HEARTBEAT, refresh_leases
from .keys import DEFAULT_PREFIX, LeaseKeys, validate_name, validate_prefix
from .lease import Lease, LostCallback
from .replication import acknowledged_by
from .scripts import ACQUIRE, INSPECT, RELEASE

__all__ = ["WAIT_LEASE", "Holder", "LeaseSet", "Waiter", "parse_inspect"]

WAIT_LEASE = 5.0
MIN_TTL = 0.01
_HOSTNAME = socket.gethostname()

Self = TypeVar("Self", bound="LeaseSet")


@dataclass(frozen=True)
class Holder:
    """One current holder, as Redis sees it."""

    owner: str
    token: int
    acquired_at: float  # Redis time, seconds since the epoch
    expires_in: float  # seconds
    ttl: float
    meta: dict[str, Any]


@dataclass(frozen=True)
class Waiter:
    """One queued waiter, in arrival order."""

    owner: str
    ttl: float
    meta: dict[str, Any]


def _check_ttl(ttl: object, what: str = "ttl") -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {type(ttl).__name__}: {ttl!r}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"{what} must be a positive, finite number of seconds, got {ttl!r}")
    if ttl < MIN_TTL:
        raise ValueError(f"{what} must be at least {MIN_TTL} s, got {ttl!r}")
    return float(ttl)


def _check_timeout(timeout: object, what: str) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or None, got {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"{what} must be >= 0 or None, got {timeout!r}")
    return float(timeout)


def _check_client(client: object) -> Any:
    if not callable(getattr(client, "evalsha", None)) or not callable(
        getattr(client, "blpop", None)
    ):
        raise TypeError(
            f"client must be a redis-py client (redis.Redis or RedisCluster), got {client!r}"
        )
    return client


def _socket_timeout(client: Any) -> float | None:
    # redis.Redis (also Sentinel's master_for): its pool; RedisCluster: its nodes manager.
    holder = getattr(client, "connection_pool", None) or getattr(client, "nodes_manager", None)
    value = getattr(holder, "connection_kwargs", {}).get("socket_timeout")
    return float(value) if value else None


def parse_inspect(reply: Any) -> tuple[float, list[Holder], list[Waiter]]:
    """``inspect.lua``'s reply as (Redis time in seconds, holders, waiters)."""
    now_ms, raw_holders, raw_waiters = reply
    holders = []
    for i in range(0, len(raw_holders), 3):
        token, acquired, ttl_ms, meta = _text(raw_holders[i + 2]).split(":", 3)
        holders.append(
            Holder(
                owner=_text(raw_holders[i]),
                token=int(token),
                acquired_at=int(acquired) / 1000,
                expires_in=(float(raw_holders[i + 1]) - int(now_ms)) / 1000,
                ttl=int(ttl_ms) / 1000,
                meta=_parse_meta(meta),
            )
        )
    waiters = []
    for i in range(0, len(raw_waiters), 2):
        _, ttl_ms, meta = _text(raw_waiters[i + 1]).split(":", 2)
        waiters.append(Waiter(_text(raw_waiters[i]), int(ttl_ms) / 1000, _parse_meta(meta)))
    return int(now_ms) / 1000, holders, waiters


def _parse_meta(raw: str) -> dict[str, Any]:
    try:
        meta = json.loads(raw) if raw else {}
    except ValueError:
        return {"raw": raw}
    return meta if isinstance(meta, dict) else {"raw": meta}


class LeaseSet:
    """Up to ``limit`` concurrent holders of ``name``; see the module docstring.

    An instance holds at most one lease at a time.  The lease belongs to the
    instance, not to a thread: it may be released from another thread.  Use
    one instance per concurrent holder.
    """

    _default_blocking: bool = True
    _default_blocking_timeout: float | None = None

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
    ) -> None:
        self.client = _check_client(client)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ValueError(f"replicas must be an int >= 0, got {replicas!r}")
        self.replicas = replicas
        self.replica_timeout = _check_ttl(replica_timeout, "replica_timeout")
        if not isinstance(owner_prefix, str) or ":" in owner_prefix:
            raise ValueError(f"owner_prefix must be a str without ':', got {owner_prefix!r}")
        self.owner_prefix = owner_prefix
        self.name = validate_name(name)
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit must be an int, got {type(limit).__name__}: {limit!r}")
        if limit <= 0:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.ttl = _check_ttl(ttl)
        self.keys = LeaseKeys(validate_prefix(prefix), self.name)
        self.blocking_timeout = (
            self._default_blocking_timeout
            if blocking_timeout is ...
            else _check_timeout(blocking_timeout, "blocking_timeout")
        )
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, got {on_lost!r}")
        self._on_lost: tuple[LostCallback, ...] = (on_lost,) if on_lost else ()
        try:
            meta_json = json.dumps(dict(meta or {}), sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"meta must be JSON-serialisable: {exc}") from exc
        # holder meta is this JSON object plus host and pid (added per acquire: forks)
        separator = ", " if meta_json != "{}" else ""
        self._meta_head = f'{meta_json[:-1]}{separator}"host": {json.dumps(_HOSTNAME)}, '
        # Encoded once: every script call sends these, and encoding is a
        # visible share of an uncontended acquire/release cycle.
        self._script_keys: list[bytes] = [k.encode() for k in self.keys.script_keys()]
        self._constant_args = tuple(
            str(n).encode() for n in (limit, int(self.ttl * 1000), int(WAIT_LEASE * 1000))
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

        Local and free: the heartbeat turns it False within one interval of
        Redis losing the lease, and it turns False by itself once the TTL has
        passed since the last confirmed renewal.
        """
        return self._lease is not None and not self._lease.lost

    # -- operations ---------------------------------------------------------

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Take a slot; True on success.

        ``blocking=False``: one attempt.  ``blocking=True``: wait in FIFO
        order, woken by a release, for at most ``timeout`` seconds (None:
        forever).  Raises :class:`LockError` if this instance already holds a
        lease, and Redis errors as they are (nothing is held then).
        """
        if blocking is None:
            blocking = self._default_blocking
        timeout = _check_timeout(timeout, "timeout")
        if timeout is not None and not blocking:
            raise ValueError("timeout applies to blocking acquires only")
        if self._lease is not None:
            if not self._lease.lost:
                raise LockError(f"this object already holds {self.name!r}; release it first")
            self._forget()
        owner = self.owner_prefix + secrets.token_hex(16)
        meta = f'{self._meta_head}"pid": {os.getpid()}}}'
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
                    return self._hold(owner, reply, sent_at)
                if not blocking:
                    return False
                block = min(-reply / 1000, WAIT_LEASE / 2)
                if deadline is not None:
                    block = min(block, deadline - time.monotonic())
                    if block <= 0:
                        self._abandon(owner)
                        return False
                if cap is not None:
                    block = min(block, cap * 0.8)
                popped = self.client.blpop([self.keys.wake(owner)], timeout=max(block, 0.001))
                if popped is not None:
                    return self._hold(owner, int(popped[1]), sent_at)
        except BaseException:
            if blocking:
                self._abandon_quietly(owner)
            raise

    def release(self) -> None:
        """Give the slot back (handing it to the next waiter).

        Raises :class:`NotOwned` if this instance holds nothing, and
        :class:`LockLost` if the lease had expired or been taken meanwhile.
        Either way the instance holds nothing afterwards.
        """
        lease = self._lease
        if lease is None:
            raise NotOwned(f"release() of {self.name!r}, which this object does not hold")
        self._forget()
        held = RELEASE(self.client, self._script_keys, self._release_args(lease.owner))
        if not held:
            raise LockLost(
                f"lease on {self.name!r} (fencing token {lease.token}) expired or was taken "
                "before release"
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
            lease.ttl = _check_ttl(ttl)
            HEARTBEAT.add(lease)  # renew at the new pace from now on
        sent_at = time.monotonic()
        if refresh_leases(self.client, [lease])[0] > 0:
            lease.confirm(sent_at)
            return True
        lease.mark_lost("gone at refresh: expired, deleted, or Redis lost its data")
        self._forget()
        return False

    def holders(self) -> list[Holder]:
        """Current unexpired holders, from Redis."""
        return parse_inspect(INSPECT(self.client, self._script_keys, []))[1]

    def waiters(self) -> list[Waiter]:
        """Live queued waiters in arrival order, from Redis."""
        return parse_inspect(INSPECT(self.client, self._script_keys, []))[2]

    # -- context manager ----------------------------------------------------

    def __enter__(self: Self) -> Self:
        blocking = self.blocking_timeout != 0
        timeout = self.blocking_timeout if blocking else None
        if not self.acquire(blocking=blocking, timeout=timeout):
            raise AcquireTimeout(
                f"could not acquire {self.name!r} within {self.blocking_timeout} s"
                if blocking
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

    # -- internals ----------------------------------------------------------

    def release_owner(self, owner: str) -> bool:
        """Release the slot (or queue place) of ``owner``, whoever holds it locally.

        For cleaning up after a holder that cannot release itself (a worker
        child killed mid-task).  True if ``owner`` held an unexpired slot.
        """
        return bool(RELEASE(self.client, self._script_keys, self._release_args(owner)))

    def _release_args(self, owner: str) -> list[Any]:
        limit, _, wait_ms = self._constant_args
        return [owner, limit, wait_ms]

    def _hold(self, owner: str, token: int, sent_at: float) -> bool:
        self._lease = Lease(
            self.client, self.keys, owner, token, self.ttl, sent_at + self.ttl, self._on_lost
        )
        HEARTBEAT.add(self._lease)
        if self.replicas:
            self._await_replicas(owner)
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

    def _forget(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.close()
            HEARTBEAT.discard(lease)

    def _abandon(self, owner: str) -> None:
        """Leave the queue; a slot handed to us meanwhile is passed on."""
        self.release_owner(owner)

    def _abandon_quietly(self, owner: str) -> None:
        # Redis unreachable: the queue entry lapses by itself.
        with contextlib.suppress(Exception):
            self._abandon(owner)

    def __repr__(self) -> str:
        state = f"token={self.token}" if self._lease is not None else "not held"
        return f"<{type(self).__name__} {self.name!r} limit={self.limit} {state}>"


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
