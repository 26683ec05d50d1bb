"""A held slot, as the holder and the heartbeat see it."""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .keys import LeaseKeys
from .scripts import REFRESH

__all__ = ["Lease", "LostCallback"]

log = logging.getLogger("celery_redislock")

LostCallback = Callable[["Lease"], None]


class Lease:
    """One acquisition of a lock or semaphore slot.

    ``valid_until`` is a local ``time.monotonic()`` deadline that never lies
    beyond the expiry Redis holds: it is the send time of the last request
    that set the expiry, plus the TTL.  So :attr:`lost` turns true no later
    than the lease can have expired in Redis, even when Redis cannot be
    reached to ask.

    ``handle`` is a weak reference to the object that holds the lease (the
    lock or semaphore): once it is dead the lease is :attr:`abandoned`, and
    the heartbeat stops renewing it.
    """

    def __init__(
        self,
        client: Any,
        keys: LeaseKeys,
        owner: str,
        token: int,
        ttl: float,
        valid_until: float,
        on_lost: tuple[LostCallback, ...] = (),
        handle: weakref.ref[Any] | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.owner = owner
        self.token = token
        self.ttl = ttl
        self.valid_until = valid_until
        self._on_lost = on_lost
        self._handle = handle
        self._guard = threading.Lock()
        self._lost_reason: str | None = None
        self._closed = False
        self._overdue_since: float | None = None
        self._rechecked_at = -math.inf
        self._asker: threading.Thread | None = None  # the recheck under way, if any
        #: a newer call superseded this holder (lock_supersede), as the last
        #: renewal or checkpoint reported it
        self.superseded = False

    @property
    def name(self) -> str:
        return self.keys.name

    @property
    def lost(self) -> bool:
        """True once the lease is known or possibly gone (also past ``valid_until``)."""
        return self._lost_reason is not None or time.monotonic() >= self.valid_until

    @property
    def reported_lost(self) -> bool:
        """Whether the loss was reported (:meth:`mark_lost` ran: the warning,
        the ``on_lost`` callbacks); a lease released first never is."""
        return self._lost_reason is not None

    @property
    def lost_reason(self) -> str | None:
        if self._lost_reason is None and time.monotonic() >= self.valid_until:
            return "not renewed within its ttl"
        return self._lost_reason

    @property
    def abandoned(self) -> bool:
        """True once the object holding the lease was garbage-collected
        (nobody can release it any more).  Never true without a ``handle``."""
        return self._handle is not None and self._handle() is None

    def confirm(self, sent_at: float) -> None:
        """Redis extended the lease by a request sent at ``sent_at`` (monotonic)."""
        self.valid_until = max(self.valid_until, sent_at + self.ttl)
        if self.valid_until > time.monotonic():
            self._overdue_since = None

    # -- renewals done by others ----------------------------------------------
    # Past ``valid_until`` the lease may still be held: another process (the
    # Celery worker's main process, see run/request.py) may have renewed it while
    # this one could not run (a C call holding the GIL, a blocked event loop).
    # So the heartbeat reports the loss only after a renewal of its own, sent
    # after it saw the deadline pass, went unconfirmed for ``grace`` seconds,
    # and owned() asks Redis once before answering False.

    @property
    def grace(self) -> float:
        """How long an overdue lease waits for a fresh renewal before it is reported lost."""
        return max(self.ttl / 3, 0.1)

    def report_at(self, now: float) -> float | None:
        """For the heartbeat: when to report this lease lost if nothing confirms it first.

        None if already reported or released.  The grace starts when the
        heartbeat first sees the deadline passed, not at the deadline: a
        process that was stopped longer than the ttl still asks Redis first.
        """
        if self._lost_reason is not None or self._closed:
            return None
        if now < self.valid_until:
            return self.valid_until
        if self._overdue_since is None:
            self._overdue_since = now
        return self._overdue_since + self.grace

    def recheck(self) -> bool:
        """Whether the lease is still held, asking Redis (one renewal) once overdue.

        True at once before ``valid_until``.  Past it, renews the lease
        (``refresh.lua``: only if unexpired by Redis time, never revived) and
        confirms it when Redis still holds it.  False if gone, already
        reported lost or released, or Redis cannot be asked or does not answer
        within ``grace`` seconds (the caller waits that long at most, however
        long the client's timeouts are); then no new request is sent for
        ``grace`` seconds.  Never reports the loss itself: the heartbeat does.
        """
        if self._lost_reason is not None or self._closed:
            return False
        now = time.monotonic()
        if now < self.valid_until:
            return True
        if now - self._rechecked_at < self.grace:
            return False
        if self._asker is not None and self._asker.is_alive():
            return False  # the last question still hangs: one at a time
        self._rechecked_at = now
        answer: list[bool] = []

        def ask() -> None:
            try:
                held = self.renew() > 0
            except Exception as exc:
                log.debug("recheck of %r failed: %r", self.keys.name, exc)
                return
            if held:
                self.confirm(now)  # a late answer still counts from its send time
            answer.append(held)

        # Asked in a thread of its own, so a Redis that hangs holds the caller
        # for ``grace`` at most, not for the client's socket timeout and retries.
        asker = threading.Thread(target=ask, name="redislock-recheck", daemon=True)
        try:
            asker.start()
        except RuntimeError as exc:  # no thread to be had (a limit, shutdown)
            log.debug("recheck of %r not sent: %r", self.keys.name, exc)
            return False
        self._asker = asker
        asker.join(self.grace)
        return bool(answer) and answer[0]

    def renew(self) -> int:
        """One ``refresh.lua`` call for this lease alone: the new remaining lease
        in ms, or 0 if it was gone (never revived).  The heartbeat renews many
        leases per call instead (heartbeat.refresh_leases)."""
        remaining = int(
            REFRESH(
                self.client, self.keys.refresh_keys(), [self.owner, max(1, int(self.ttl * 1000))]
            )[0]
        )
        return self.note_renewal(remaining)

    def note_renewal(self, remaining: int) -> int:
        """A ``refresh.lua`` result for this lease: negative means renewed but
        superseded (noted in :attr:`superseded`); returns the remaining ms."""
        if remaining < 0:
            self.superseded = True
        return abs(remaining)

    def close(self) -> None:
        """The holder is releasing: later renewal results are no news to report."""
        with self._guard:
            self._closed = True

    def mark_lost(self, reason: str) -> bool:
        """Record the loss once: warn and run the callbacks.

        False (and silent) if already lost or released by the holder.
        """
        with self._guard:
            if self._lost_reason is not None or self._closed:
                return False
            self._lost_reason = reason
        log.warning("lease on %r (fencing token %d) lost: %s", self.keys.name, self.token, reason)
        for callback in self._on_lost:
            try:
                callback(self)
            except Exception:
                log.exception("on_lost callback %r failed", callback)
        return True

    def __repr__(self) -> str:
        return f"<Lease {self.keys.name!r} token={self.token} lost={self.lost}>"
