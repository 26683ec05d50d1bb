"""Run-time overrides of a name's limit and rate, stored in Redis.

A plan change (an account moved from 5 to 20 concurrent tasks, from
``100/m`` to ``500/m``) needs no deploy::

    Overrides(redis.Redis(), "account:42").set(limit=20, rate="500/m")
    Overrides(redis.Redis(), "account:42").clear()      # back to the code's values

``celery redislock limit set / clear / show`` does the same from a shell.
One hash per name (``<prefix>:{<name>}:override``, beside the name's other
keys), written by one script (``override.lua``) and read by every admission
script of the name in the same call that decides: no cache, so the next
decision after :meth:`Overrides.set` returns uses it.

Guaranteed:

* **limit** replaces the limit of every caller of the name whose limit is not
  fixed: :class:`~celery_redislock.FairSemaphore`, ``SemaphoreTask`` and
  ``RateLimitedTask``.  A lock's limit is fixed (``RedisLock``,
  ``LockedTask``): an override never lets two lock holders in.  Holders
  already in follow it too (each stores its limit as passed and every
  admission resolves it): a raised limit fills its new slots at once (parked
  work is promoted into them by the woken sweepers); a lowered one admits no
  new holder until the holders are fewer than it, and holders already in keep
  their slots.
* **rate** (with its **burst**, default 1) replaces the rate of every start
  the library checks against a rate: tasks with a ``rate``, every task of the
  ``park`` policy (so an override can also throttle a key that had no rate)
  and :class:`~celery_redislock.RateLimiter`.  A cost above the overriding
  burst counts as the whole burst (it could never start otherwise).  It
  applies from the next start on: the schedule the old rate booked is cut
  to at most a full burst of the new one (runs admitted already, at most
  0.25 s from their start, keep their places), so a raised rate does not
  wait out the old rate's times; within that bound the starts booked count
  against the new rate.  Clearing leaves the schedule (the starts booked
  under the override count against the code's rate).  Parked work
  follows at once: setting or clearing wakes the sweepers.  Not followed: a
  task a *listed* limit's rate sent back before the change waits out the
  time it was given then (the key's hold; docs/limits-and-eager.md).
* An override stays until it is cleared (no TTL).

Not guaranteed: a lock Redis that loses its data loses its overrides: every
name then runs by the values in the code again.  Tasks waiting with the
``wait`` policy pick a changed limit up when they next ask (within half their
wait lease).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .keys import (
    DEFAULT_PREFIX,
    LeaseKeys,
    RateKeys,
    validate_name,
    validate_prefix,
)
from .park import room_came_back
from .rate import Rate, check_burst, parse_rate
from .scripts import OVERRIDE, text

__all__ = ["Override", "Overrides", "overridden_names"]

_CLEARABLE = ("all", "limit", "rate")


@dataclass(frozen=True)
class Override:
    """A name's override: None where the code's value applies."""

    limit: int | None = None
    rate: Rate | None = None
    burst: int | None = None

    def __bool__(self) -> bool:
        return self.limit is not None or self.rate is not None

    def __str__(self) -> str:
        parts = []
        if self.limit is not None:
            parts.append(f"limit {self.limit}")
        if self.rate is not None:
            parts.append(f"rate {self.rate} burst {self.burst}")
        return ", ".join(parts) or "none"


def check_limit(limit: object) -> int:
    """``limit`` as an int >= 1, else TypeError/ValueError."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int >= 1, got {type(limit).__name__}: {limit!r}")
    if limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")
    return limit


class Overrides:
    """The run-time override of one name (see the module docstring)."""

    def __init__(self, client: Any, name: str, prefix: str = DEFAULT_PREFIX) -> None:
        self.client = client
        self.name = validate_name(name)
        self.prefix = validate_prefix(prefix)
        self.keys = LeaseKeys(prefix, name)

    def set(self, *, limit: int | None = None, rate: object = None, burst: int = 1) -> Override:
        """Override the limit, the rate (and its burst), or both; what is not
        given stays as it is.  Returns the override now in force."""
        if limit is None and rate is None:
            raise ValueError("give a limit, a rate or both")
        limit_arg = "" if limit is None else str(check_limit(limit))
        interval, rate_text = "", ""
        if rate is not None:
            parsed = parse_rate(rate)
            interval = str(max(1, round(parsed.interval * 1_000_000)))
            rate_text = str(parsed)
        burst = check_burst(burst)
        return self._change([limit_arg, interval, burst, rate_text])

    def clear(self, what: str = "all") -> Override:
        """Back to the code's values: ``"all"``, or only the ``"limit"`` or ``"rate"``."""
        if what not in _CLEARABLE:
            raise ValueError(f"what must be one of {', '.join(_CLEARABLE)}; got {what!r}")
        return self._change(
            [
                "-" if what in ("all", "limit") else "",
                "-" if what in ("all", "rate") else "",
                1,
                "",
            ]
        )

    def get(self) -> Override:
        """The override in force (falsy: none)."""
        return _parse(self.client.hgetall(self.keys.override))

    def _change(self, args: list[Any]) -> Override:
        rate = RateKeys(self.prefix, self.name)
        keys = [self.keys.override, self.keys.info, rate.rate, rate.started]
        reply = OVERRIDE(self.client, keys, args)
        # Parked work's due times were computed with the old values, and a
        # raised limit has room for the keys waiting for it as a listed limit.
        room_came_back(self.client, self.prefix, self.name)
        pairs = list(reply)
        return _parse({pairs[i]: pairs[i + 1] for i in range(0, len(pairs), 2)})


def _parse(fields: dict[Any, Any]) -> Override:
    values = {text(k): text(v) for k, v in fields.items()}
    limit = values.get("limit")
    rate = values.get("rate")
    return Override(
        int(limit) if limit else None,
        parse_rate(rate) if rate else None,
        int(values.get("burst") or 1) if rate else None,
    )


def overridden_names(client: Any, prefix: str) -> list[str]:
    """Every name with an override under ``prefix``, sorted (SCAN, never KEYS:
    overrides are few, set by hand, so they are not indexed)."""
    names = set()
    for key in client.scan_iter(match=f"{prefix}:{{*}}:override", count=1000):
        keys = LeaseKeys.parse(text(key))
        if keys is not None and keys.prefix == prefix:
            names.add(keys.name)
    return sorted(names)
