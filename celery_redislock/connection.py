"""Building a redis-py client from what Celery users already write.

Supported here: ``redis://``, ``rediss://`` (TLS) and ``unix://`` URLs.
``socket_timeout`` defaults to 5 s so that no call (including the
heartbeat's) can hang forever on a paused or unreachable server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

__all__ = ["DEFAULT_SOCKET_TIMEOUT", "client_from_url"]

DEFAULT_SOCKET_TIMEOUT = 5.0


def client_from_url(url: str, options: Mapping[str, Any] | None = None) -> Any:
    """A redis-py client for ``url``; ``options`` are passed to the client."""
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"not a Redis URL: {url!r} (expected redis://, rediss:// or unix://)")
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("redis", "rediss", "unix"):
        raise ValueError(
            f"unsupported Redis URL scheme {scheme!r} in {url!r} "
            "(expected redis://, rediss:// or unix://)"
        )
    kwargs: dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
        "socket_connect_timeout": DEFAULT_SOCKET_TIMEOUT,
        "health_check_interval": 30,
    }
    kwargs.update(options or {})
    return redis.Redis.from_url(url, **kwargs)
