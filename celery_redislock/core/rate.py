"""A rate limit shared by every client of one Redis: at most R starts per period per name.

::

    api = RateLimiter(redis.Redis(), "api:acme", rate="20/s", burst=5)
    decision = api.try_acquire()
    if decision:
        call_the_api()
    else:
        print(f"over the rate; admitted in {decision.retry_after:.3f} s")

GCRA (the generic cell rate algorithm): one key per name holding the
*theoretical arrival time*, one Lua call per decision, Redis ``TIME`` as the
only clock, the name's keys hash-tagged into one cluster slot.

Guaranteed:

* over any window of length ``w``, the units admitted for a name are at most
  ``burst + w * rate`` (so ``rate`` on average, and at most ``burst`` back to
  back), whatever the number of clients, their clocks or their interleaving;
* a refused call takes nothing and says how long until a call of the same
  cost would be admitted (``retry_after``, a pause included);
* a ``cost`` above ``burst`` is refused with ``ValueError`` at the call: it
  could never be admitted, and it is never admitted silently;
* an idle name leaves no key behind once its bucket is full again.

Not guaranteed: a Redis that loses its data (a restart without persistence,
a failover to a replica that missed the last write) forgets the arrival time,
so at most one extra ``burst`` starts right after.  Blocking :meth:`acquire`
is first-come only in tendency: waiters retry when their turn is due, and
none is starved of the rate, but two that wake together race for one unit.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from .keys import DEFAULT_PREFIX, RateKeys, validate_name, validate_prefix
from .scripts import RATE_ACQUIRE, RATE_PAUSE
from .validation import check_client, check_timeout

__all__ = [
    "NO_RATE",
    "Rate",
    "RateDecision",
    "RateLimiter",
    "RateTerms",
    "check_burst",
    "check_cost",
    "parse_rate",
]

_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: the longest interval between two starts a rate may ask for (seconds)
MAX_INTERVAL = 100_000_000.0
_NOTATION = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*/\s*([smhd])\s*$")


@dataclass(frozen=True)
class Rate:
    """``count`` starts per ``period`` seconds."""

    count: float
    period: float

    @property
    def interval(self) -> float:
        """Seconds between two evenly spaced starts."""
        return self.period / self.count

    @property
    def per_second(self) -> float:
        return self.count / self.period

    def __str__(self) -> str:
        """The rate in the notation :func:`parse_rate` reads (``"500/m"``,
        ``"1000000/h"``, ``"1e-05/s"``), to 6 significant digits: what
        ``status``, ``limit show`` and the web view show, and an override
        stores beside its exact interval."""
        unit = {v: k for k, v in _PERIODS.items()}.get(self.period)
        return f"{_number(self.count)}/{unit}" if unit else f"{_number(self.per_second)}/s"


def _number(value: float) -> str:
    """``value`` to 6 significant digits, as the shortest text of that (``"500"``,
    ``"1000000"``, ``"1.66667"``, ``"1e-05"``): no ``"1e+06"``, no float noise."""
    text = repr(float(f"{value:.6g}"))
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True)
class RateTerms:
    """What one start asks of its name's rate: the rate, the burst and its cost
    (checked: ``1 <= cost <= burst``); ``rate`` None: no rate, only a pause
    holds it."""

    rate: Rate | None = None
    burst: int = 1
    cost: int = 1

    def __post_init__(self) -> None:
        check_cost(self.cost, check_burst(self.burst))

    def script_args(self) -> list[int]:
        """ARGV of the park scripts: interval in microseconds (0: none), burst, cost."""
        interval = 0 if self.rate is None else max(1, round(self.rate.interval * 1_000_000))
        return [interval, self.burst, self.cost]


def parse_rate(value: object, what: str = "rate") -> Rate:
    """``value`` as a :class:`Rate`: Celery's notation (``"10/s"``, ``"100/m"``,
    ``"1000/h"``, also ``"/d"``), a number per second (``20``, ``0.5``, ``"20"``)
    or a :class:`Rate`.  Anything else, or a rate that is not positive and
    finite, is a ``TypeError`` / ``ValueError`` naming ``what``."""
    if isinstance(value, Rate):
        rate = value
    elif isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(
            f'{what} must be a rate such as "20/s", "100/m" or a number per second, '
            f"got {type(value).__name__}: {value!r}"
        )
    elif isinstance(value, str):
        match = _NOTATION.match(value)
        if match:
            rate = Rate(float(match.group(1)), _PERIODS[match.group(2)])
        else:
            try:
                rate = Rate(float(value), 1.0)
            except ValueError:
                raise ValueError(
                    f'{what} must look like "20/s", "100/m", "1000/h" or "5/d", or be a '
                    f"number per second; got {value!r}"
                ) from None
    else:
        rate = Rate(float(value), 1.0)
    if not (math.isfinite(rate.count) and rate.count > 0 and rate.period > 0):
        raise ValueError(f"{what} must be a positive, finite rate; got {value!r}")
    # Redis keeps a rate's schedule in whole microseconds, in a double.
    if rate.interval < 1e-6:
        raise ValueError(
            f"{what} must be at most 1000000/s (one start a microsecond); got {value!r}"
        )
    if rate.interval > MAX_INTERVAL:
        raise ValueError(
            f"{what} must be at least one start per {MAX_INTERVAL:.0f} s (about three years); "
            f"got {value!r}"
        )
    return rate


def check_burst(burst: object, what: str = "burst") -> int:
    """``burst`` as an int >= 1, else TypeError/ValueError."""
    if isinstance(burst, bool) or not isinstance(burst, int):
        raise TypeError(f"{what} must be an int >= 1, got {type(burst).__name__}: {burst!r}")
    if burst < 1:
        raise ValueError(f"{what} must be an int >= 1, got {burst!r}")
    return burst


def check_cost(cost: object, burst: int, what: str = "cost") -> int:
    """``cost`` as an int in ``1..burst``: a cost above the burst could never
    be admitted, so it is an error, never a silent admission."""
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise TypeError(f"{what} must be an int >= 1, got {type(cost).__name__}: {cost!r}")
    if cost < 1:
        raise ValueError(f"{what} must be an int >= 1, got {cost!r}")
    if cost > burst:
        raise ValueError(
            f"{what} {cost} is above the burst {burst}: such a start could never be "
            "admitted (raise the burst, or split the work)"
        )
    return cost


#: the terms of a start without a rate
NO_RATE = RateTerms()


@dataclass(frozen=True)
class RateDecision:
    """The answer of :meth:`RateLimiter.try_acquire`; true when admitted."""

    admitted: bool
    retry_after: float  #: seconds until a start of this cost would be admitted (0 if admitted)

    def __bool__(self) -> bool:
        return self.admitted


class RateLimiter:
    """The rate limit of one name (see the module docstring for the guarantees).

    ``rate``: see :func:`parse_rate`; ``burst``: how many units may start back
    to back (default 1: evenly spaced).  Clients of one name should agree on
    ``rate`` and ``burst``; each decision uses the caller's.
    """

    def __init__(
        self,
        client: Any,
        name: str,
        rate: object = "1/s",
        burst: int = 1,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        self.client = check_client(client)
        self.name = validate_name(name)
        self.rate = parse_rate(rate)
        self.burst = check_burst(burst)
        self.keys = RateKeys(validate_prefix(prefix), name)

    def _decide(self, cost: object, take: bool) -> RateDecision:
        units = check_cost(cost, self.burst)
        admitted, wait_us = RATE_ACQUIRE(
            self.client,
            [self.keys.rate, self.keys.pause, self.keys.override],
            [repr(self.rate.interval * 1_000_000), self.burst, units, 1 if take else 0],
        )
        return RateDecision(bool(int(admitted)), int(wait_us) / 1_000_000)

    def try_acquire(self, cost: int = 1) -> RateDecision:
        """Take ``cost`` units if the rate admits them now; never waits."""
        return self._decide(cost, take=True)

    def peek(self, cost: int = 1) -> RateDecision:
        """Whether ``cost`` units would be admitted now, taking nothing."""
        return self._decide(cost, take=False)

    def acquire(self, cost: int = 1, blocking_timeout: float | None = None) -> bool:
        """Take ``cost`` units, waiting up to ``blocking_timeout`` seconds (None:
        as long as it takes) for the rate to admit them; False on timeout.
        Redis decides each try; the wait between tries is what it said."""
        timeout = check_timeout(blocking_timeout, "blocking_timeout")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            decision = self.try_acquire(cost)
            if decision:
                return True
            wait = decision.retry_after
            if deadline is not None:
                left = deadline - time.monotonic()
                if left < wait:
                    return False
            time.sleep(wait)

    def pause(self, seconds: float) -> float:
        """No start of this name for ``seconds`` from now (Redis time), for
        every client: an upstream's ``Retry-After``.  A pause only lengthens a
        running one.  Returns the pause left, in seconds."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"pause must be a number of seconds, got {seconds!r}")
        if not math.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"pause must be a positive, finite number of seconds, got {seconds!r}")
        return int(RATE_PAUSE(self.client, [self.keys.pause], [math.ceil(seconds * 1000)])) / 1000

    def resume(self) -> None:
        """End a pause at once."""
        RATE_PAUSE(self.client, [self.keys.pause], [0])

    def paused_for(self) -> float:
        """Seconds of pause left (0: not paused)."""
        return max(int(self.client.pttl(self.keys.pause)), 0) / 1000
