"""How many may hold a name at once: a lock, a semaphore of N slots, or a rate with no cap.

The kind is explicit in Python (:class:`Capacity`).  The scripts, and the
holder, waiter and park entries they store in Redis, carry it as one integer,
the *encoded* limit, which ``lua/includes/limit_of.lua`` reads:

======================  ===========  ==========================================
kind                    encoded      what a run-time override (``limit set``) does
======================  ===========  ==========================================
``lock``                ``-1``       nothing: a lock is never shared
``semaphore`` of n      ``n``        replaces n
``rate`` (no cap)       ``UNCAPPED`` replaces it (a cap on a rate-only key)
======================  ===========  ==========================================

This module is the only Python that writes or reads that encoding
(:attr:`Capacity.encoded`, :meth:`Capacity.decoded`): stored entries keep it,
so workers of this and earlier versions read each other's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

__all__ = ["UNCAPPED", "Capacity", "Kind"]

Kind = Literal["lock", "semaphore", "rate"]

#: the slots of a rate-only key as the scripts count them: more than can ever hold
UNCAPPED = 1_000_000


@dataclass(frozen=True)
class Capacity:
    """The kind of a name's guard and its slots (1 for a lock, ``UNCAPPED``
    for a rate).  ``Capacity.lock()``, ``Capacity.semaphore(n)``,
    ``Capacity.rate()`` build one; ``decoded(raw)`` reads one from Redis."""

    kind: Kind
    slots: int

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"a {self.kind} has at least one slot, got {self.slots}")

    @classmethod
    def lock(cls) -> Capacity:
        return cls("lock", 1)

    @classmethod
    def semaphore(cls, slots: int) -> Capacity:
        return _semaphore(slots)

    @classmethod
    def rate(cls) -> Capacity:
        return cls("rate", UNCAPPED)

    @property
    def limit(self) -> int | None:
        """The cap on holders, None for a rate (no cap)."""
        return None if self.kind == "rate" else self.slots

    @cached_property
    def encoded(self) -> int:
        """The integer the scripts take and store (see the module docstring)."""
        return -self.slots if self.kind == "lock" else self.slots

    @classmethod
    def decoded(cls, raw: int) -> Capacity:
        """The capacity an encoded limit stands for (``raw`` as stored, or as
        a script resolved it: a resolved limit is never negative)."""
        if raw < 0:
            return cls("lock", -raw)
        if raw >= UNCAPPED:
            return cls.rate()
        return cls.semaphore(raw)


@lru_cache(maxsize=1024)
def _semaphore(slots: int) -> Capacity:
    # One instance per limit in use: a call's capacity is asked for several
    # times on its way (equal instances compare equal either way).
    return Capacity("semaphore", slots)
