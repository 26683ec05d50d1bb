"""What a Celery worker does for this library when it starts and stops, in one place.

:func:`connect` (called once by the package's ``__init__``) connects these
receivers to Celery's worker signals:

=======================  ==================================================
``worker_init``          note whether the worker sends task events (``-E``:
                         ``events.in_worker``); refuse a green pool
                         (gevent, eventlet) for guarded
                         tasks (``poolcheck.check_pool``); with
                         ``redislock_metrics_port``, start the metrics
                         (``metrics.start``: before the pool forks)
``worker_ready``         probe the lock Redis (``checks``); warn when it
                         persists nothing and parked tasks would die with it;
                         start the sweeper thread (``parking.sweeper``) when
                         the settings can be used at all; state
                         what the main process holds (``core/liveness.py``,
                         for the solo and threads pools)
``worker_process_init``  state what each pool child holds
``worker_shutdown``      stop the sweepers; remove the metrics' files
=======================  ==================================================

Each receiver does nothing in a worker whose app has no guarded task.
"""

from __future__ import annotations

from typing import Any

from celery import signals

from .. import events
from ..core import liveness
from ..parking.states import STATES_SEEN
from ..parking.sweeper import start_sweeper, stop_sweepers
from ..settings import metrics_settings
from . import checks, metrics, poolcheck

__all__ = ["connect", "guarded"]


def guarded(app: Any) -> bool:
    """Whether ``app`` has a task of this library."""
    return any(getattr(t, "_redislock_kind", None) for t in app.tasks.values())


def _init(sender: Any = None, **_: Any) -> None:
    if sender is None:
        return
    events.in_worker(getattr(sender, "task_events", False), getattr(sender, "hostname", None))
    poolcheck.check_pool(sender)
    app = getattr(sender, "app", None)
    STATES_SEEN.renew(app)
    if app is not None and guarded(app):
        try:
            wanted = metrics_settings(app)
        except ValueError as exc:
            raise SystemExit(f"celery-redislock: {exc}") from None
        if wanted["metrics_port"] is not None:  # before the pool forks: see worker/metrics.py
            metrics.start(wanted["metrics_port"], wanted["metrics_host"])


def _ready(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    if app is None or not guarded(app):
        return
    liveness.RECORDER.enable()
    if checks.check_at_start(app):  # else no Redis to sweep: the check said why
        start_sweeper(app)


def _process_init(**_: Any) -> None:
    liveness.RECORDER.enable()


def _shutdown(**_: Any) -> None:
    stop_sweepers()
    metrics.stop()


def connect() -> None:
    """Connect the receivers (idempotent: each has a dispatch uid)."""
    signals.worker_init.connect(_init, weak=False, dispatch_uid="redislock-init")
    signals.worker_ready.connect(_ready, weak=False, dispatch_uid="redislock-ready")
    signals.worker_process_init.connect(
        _process_init, weak=False, dispatch_uid="redislock-process-init"
    )
    signals.worker_shutdown.connect(_shutdown, weak=False, dispatch_uid="redislock-shutdown")
