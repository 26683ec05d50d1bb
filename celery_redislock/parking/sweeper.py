"""The sweeper: a thread in every worker's main process that keeps parks moving.

Each sweep asks Redis which names are due (``park_due.lua`` on the index of
names with parked work: an overdue reservation, a free slot, a parked task
whose rate now admits it) and promotes them, all free slots of a name at
once; once per ``redislock_park_sweep_interval`` it also releases the leases
of processes of this machine that provably died (:func:`release_dead_holders`).
Overdue reservations (a lost publish, a dead publisher) are published again
with a new token, so their old copies are refused.

Between sweeps it sleeps until the index's earliest time, at most one
interval, and is woken early by the index's channel when a park call makes a
sooner time the earliest and a rate's or a hold's time is part of it (single
server; a time of holders' expiries and reservations' deadlines alone, and
every time on a cluster, waits for its next look, within one interval).  A
due name is held for one second by the sweeper that took it, so the
sweepers of many workers do not all promote it.  Started and stopped by
:mod:`celery_redislock.worker.lifecycle`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from ..core.heartbeat import is_cluster
from ..core.keys import park_wake_channel
from ..core.park import due_names
from ..run.request import WATCHER
from ..settings import broker_url, client_for, park_settings
from .promotion import promote, release_dead_holders, wake_changed_limits

__all__ = ["Sweeper", "start_sweeper", "stop_sweepers"]

log = logging.getLogger("celery_redislock")


class Sweeper:
    """A daemon thread that sweeps when a name is due (see the module docstring)."""

    def __init__(self, app: Any, interval: float | None = None) -> None:
        self.app = app
        # the settings alone: a Redis down at start is the loop's to wait out
        self.interval = interval or park_settings(app).sweep_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_dead_check = 0.0
        self._channel: Any = None

    def start(self) -> Sweeper:
        self._thread = threading.Thread(
            target=self._run, name="redislock-park-sweeper", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _sweep(self) -> tuple[int, float | None]:
        """Promote the due names; returns how many messages were published and
        the seconds until the index's earliest time (None: nothing indexed)."""
        client, settings = client_for(self.app)
        now = time.monotonic()
        if now - self._last_dead_check >= self.interval:
            self._last_dead_check = now
            release_dead_holders(self.app, WATCHER.children)
        published = wake_changed_limits(self.app, client, settings.prefix)
        names, next_in = due_names(client, settings.prefix)
        for name in names:
            published += promote(self.app, name, None, client, settings.prefix)
        if names:  # their promotions re-scored them: ask again for the earliest
            next_in = due_names(client, settings.prefix, count=0)[1]
        return published, next_in

    def _run(self) -> None:
        wait = self.interval
        failing_since: float | None = None  # the first sweep of a run of failures
        logged_at = 0.0
        logged: type[BaseException] | None = None  # the kind of error last logged
        try:
            while not self._stop.is_set():
                self._sleep(wait)
                if self._stop.is_set():
                    break
                try:
                    published, next_in = self._sweep()
                except Exception as exc:
                    # One line per ERROR_EVERY while it keeps failing the same
                    # way (Redis down for minutes would otherwise log every
                    # interval); another kind of error is logged at once.
                    now, kind = time.monotonic(), type(exc)
                    if failing_since is None or now - logged_at >= ERROR_EVERY or kind != logged:
                        log.error("park sweeper: %r (retrying every interval)", exc)
                        logged_at, logged = now, kind
                    failing_since = failing_since if failing_since is not None else now
                    wait = self.interval
                    continue
                if failing_since is not None:
                    log.info(
                        "park sweeper: sweeping again after %.1f s of failures",
                        time.monotonic() - failing_since,
                    )
                    failing_since = None
                wait = self._next_wait(published, next_in)
        finally:
            self._close_channel()

    def _next_wait(self, published: int, next_in: float | None) -> float:
        """Until the index's earliest time, at most one interval.  When a name
        is due *now* again though this sweep published nothing (its head waits
        for a holder of a lower limit), it is looked at after one interval, not
        in a loop; a time to come (a rate's next slot) is slept to exactly."""
        if next_in is None or (published == 0 and next_in <= 0):
            return self.interval
        return min(max(next_in, 0.001), self.interval)

    def _sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if a park call publishes a sooner time or
        the sweeper is stopped (checked every quarter of a second)."""
        try:
            channel = self._listen()
            if channel is not None:
                deadline = time.monotonic() + seconds
                while (left := deadline - time.monotonic()) > 0 and not self._stop.is_set():
                    message = channel.get_message(
                        ignore_subscribe_messages=True, timeout=min(left, 0.25)
                    )
                    if message:
                        return
                return
        except Exception as exc:  # a lost connection: sleep plainly, listen again next time
            log.debug("park sweeper: wake channel lost (%r)", exc)
            self._close_channel()
        self._stop.wait(seconds)

    def _listen(self) -> Any:
        if self._channel is None:
            client, settings = client_for(self.app)
            if is_cluster(client):
                return None
            channel = client.pubsub()
            channel.subscribe(park_wake_channel(settings.prefix))
            self._channel = channel
        return self._channel

    def _close_channel(self) -> None:
        if self._channel is not None:
            with contextlib.suppress(Exception):
                self._channel.close()
            self._channel = None


#: while sweeps keep failing, at most one ERROR line per this many seconds
ERROR_EVERY = 30.0

_SWEEPERS: dict[int, Sweeper] = {}


def start_sweeper(app: Any) -> None:
    """At worker start: warn if the lock Redis persists nothing, and start the
    app's sweeper (once per app)."""
    if id(app) in _SWEEPERS:
        return
    _warn_if_volatile(app)
    _SWEEPERS[id(app)] = Sweeper(app).start()


def stop_sweepers() -> None:
    for sweeper in list(_SWEEPERS.values()):
        sweeper.stop()
    _SWEEPERS.clear()


def _warn_if_volatile(app: Any) -> None:
    """Warn when parked tasks would die with a lock Redis that persists nothing."""
    try:
        client, settings = client_for(app)
        if not settings.from_factory and settings.url == broker_url(app):
            return
        save = client.config_get("save").get("save", "")
        aof = client.config_get("appendonly").get("appendonly", "no")
    except Exception:
        return  # CONFIG denied or Redis down: nothing to say
    if not save and aof == "no":
        log.warning(
            "celery-redislock: the lock Redis (redislock_url) is not the broker and persists "
            "nothing (no RDB save points, no AOF): parked tasks would be lost with it"
        )
