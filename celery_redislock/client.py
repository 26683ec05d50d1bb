"""One Redis client per process and Celery app, built from the app's settings.

Built lazily on first use from :func:`~celery_redislock.config.settings_from_app`
and :func:`~celery_redislock.connection.client_from_url`, and rebuilt in a
forked child (a client is never shared across a fork).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .config import Settings, settings_from_app
from .connection import client_from_url

__all__ = ["client_for", "reset"]

_lock = threading.Lock()
_cache: dict[int, tuple[int, Any, Settings, Any]] = {}


def client_for(app: Any) -> tuple[Any, Settings]:
    """The process's client and settings for ``app``."""
    pid = os.getpid()
    entry = _cache.get(id(app))
    if entry is not None and entry[0] == pid and entry[1] is app:
        return entry[3], entry[2]
    with _lock:
        entry = _cache.get(id(app))
        if entry is not None and entry[0] == pid and entry[1] is app:
            return entry[3], entry[2]
        settings = settings_from_app(app)
        client = client_from_url(settings.url, settings.transport_options)
        _cache[id(app)] = (pid, app, settings, client)
        return client, settings


def reset() -> None:
    """Forget every cached client (tests that change settings)."""
    with _lock:
        _cache.clear()
