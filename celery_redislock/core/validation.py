"""Checks of the numbers every lease-set call takes: precise errors, never a guess."""

from __future__ import annotations

import math

__all__ = ["MIN_TTL", "check_timeout", "check_ttl"]

MIN_TTL = 0.01


def check_ttl(ttl: object, what: str = "ttl") -> float:
    """``ttl`` as seconds: a finite number >= MIN_TTL, else TypeError/ValueError."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {type(ttl).__name__}: {ttl!r}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"{what} must be a positive, finite number of seconds, got {ttl!r}")
    if ttl < MIN_TTL:
        raise ValueError(f"{what} must be at least {MIN_TTL} s, got {ttl!r}")
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
