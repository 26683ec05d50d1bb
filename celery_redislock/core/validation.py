"""Checks of the arguments every primitive takes: precise errors, never a guess."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_TTL", "MIN_TTL", "check_client", "check_timeout", "check_ttl"]

MIN_TTL = 0.01
#: a lease longer than this (about three years) is a mistake: Redis keeps
#: milliseconds, and the heartbeat waits a third of it in one call
MAX_TTL = 100_000_000.0


def check_client(client: object) -> Any:
    """``client`` if it is a redis-py client (``redis.Redis``, ``RedisCluster``,
    a Sentinel's ``master_for``), else a TypeError."""
    if not callable(getattr(client, "evalsha", None)) or not callable(
        getattr(client, "blpop", None)
    ):
        raise TypeError(
            f"client must be a redis-py client (redis.Redis or RedisCluster), got {client!r}"
        )
    return client


def check_ttl(ttl: object, what: str = "ttl") -> float:
    """``ttl`` as seconds: a number from MIN_TTL to MAX_TTL, else TypeError/ValueError."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {type(ttl).__name__}: {ttl!r}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"{what} must be a positive, finite number of seconds, got {ttl!r}")
    if ttl < MIN_TTL:
        raise ValueError(f"{what} must be at least {MIN_TTL} s, got {ttl!r}")
    if ttl > MAX_TTL:
        raise ValueError(f"{what} must be at most {MAX_TTL:.0f} s, got {ttl!r}")
    return float(ttl)


def check_timeout(timeout: object, what: str) -> float | None:
    """``timeout`` as seconds >= 0, or None (no limit)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or None, got {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"{what} must be >= 0 or None, got {timeout!r}")
    return float(timeout)
