"""The sweeper: a thread in every worker's main process that keeps parks moving.

Once per ``redislock_park_sweep_interval`` it releases the leases of
processes of this machine that provably died (:func:`release_dead_holders`),
asks Redis which names are due (``park_due.lua`` on the index of names with
parked work: an overdue reservation, or a free slot) and promotes them, all
free slots of a name at once.  Overdue reservations (a lost publish, a dead
publisher) are published again with a new token, so their old copies are
refused.  Started and stopped by :mod:`celery_redislock.worker`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..core.park import due_names
from ..settings import client_for
from .promotion import promote, release_dead_holders

__all__ = ["Sweeper", "start_sweeper", "stop_sweepers"]

log = logging.getLogger("celery_redislock")


class Sweeper:
    """A daemon thread that runs :meth:`sweep_once` every ``interval`` seconds."""

    def __init__(self, app: Any, interval: float | None = None) -> None:
        self.app = app
        self.interval = interval or client_for(app)[1].park.sweep_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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

    def sweep_once(self) -> int:
        """One sweep; returns how many messages it published."""
        client, settings = client_for(self.app)
        release_dead_holders(self.app)
        published = 0
        for name in due_names(client, settings.prefix):
            published += promote(self.app, name, 0, client, settings.prefix)
        return published

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sweep_once()
            except Exception as exc:
                log.error("park sweeper: %r (retrying next interval)", exc)


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
        if settings.url == app.conf.get("broker_url"):
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
