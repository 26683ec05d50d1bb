"""A held slot, as the holder and the heartbeat see it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .keys import LeaseKeys

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
    ) -> None:
        self.client = client
        self.keys = keys
        self.owner = owner
        self.token = token
        self.ttl = ttl
        self.valid_until = valid_until
        self._on_lost = on_lost
        self._guard = threading.Lock()
        self._lost_reason: str | None = None
        self._closed = False

    @property
    def name(self) -> str:
        return self.keys.name

    @property
    def lost(self) -> bool:
        """True once the lease is known or possibly gone (also past ``valid_until``)."""
        return self._lost_reason is not None or time.monotonic() >= self.valid_until

    @property
    def lost_reason(self) -> str | None:
        if self._lost_reason is None and time.monotonic() >= self.valid_until:
            return "not renewed within its ttl"
        return self._lost_reason

    def confirm(self, sent_at: float) -> None:
        """Redis extended the lease by a request sent at ``sent_at`` (monotonic)."""
        self.valid_until = max(self.valid_until, sent_at + self.ttl)

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
