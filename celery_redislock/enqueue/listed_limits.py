"""The ``limits=`` option: limits a run must fit beside its own key.

::

    @app.task(
        base=SemaphoreTask,
        semaphore_key="account:{account_id}",
        semaphore_limit=3,
        lock_policy="retry",
        limits=[Limit("stripe", 20), Limit("region:{region}", 50, rate="100/s")],
    )
    def charge(account_id, region, amount): ...

Each :class:`Limit` names a semaphore shared by every task that lists the
same name (and by a ``SemaphoreTask`` whose own key is that name): ``key`` is
a template over the task's arguments or a callable ``(args, kwargs) -> str``
(as ``lock_key``), ``limit`` an ``int >= 1`` or a callable of the task's
arguments (as ``semaphore_limit``), ``rate`` an optional rate of that name
(as ``rate``, with ``burst``; one unit per start).  A run of the task holds a
slot of its own key *and* of every listed limit, or none of them
(:mod:`celery_redislock.run.listed_leases` says how).

Checked when the task class is created: ``limits`` is a list or tuple of
``Limit``; every template field and every parameter a callable names is a
parameter of the task; no two limits, nor a limit and the task's own key,
share a template.  Every policy takes them, for the whole set: ``park``
(a refused run waits in its own key's park, holding nothing),
``keep_latest`` (the same, as the key's pending call: a newer call
replaces it), ``skip``, ``raise``, ``retry`` and ``wait`` (it waits in its
process for the whole set, holding nothing between looks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.rate import NO_RATE, Rate, RateTerms, check_burst, parse_rate
from .limits import PerCall, check_limit_value
from .naming import KeyBuilder

__all__ = [
    "Limit",
    "ListedLimit",
    "Need",
    "listed_limits_of",
]


@dataclass(frozen=True)
class Limit:
    """A limit a run must fit besides its own key (see the module docstring).

    ``key``: a template over the task's arguments (``"region:{region}"``) or
    a callable ``(args, kwargs) -> str``; ``limit``: an ``int >= 1`` or a
    callable of the task's arguments returning one; ``rate``: None, or a rate
    of that name (``"100/s"``, a number per second, or a callable of the
    arguments returning one); ``burst``: how many of its starts may come back
    to back.  Checked against the task when the task class is created.
    """

    key: str | Callable[[Sequence[Any], Mapping[str, Any]], str]
    limit: int | Callable[..., int]
    rate: Any = None
    burst: int = 1

    def __post_init__(self) -> None:
        if not callable(self.key) and (not isinstance(self.key, str) or not self.key):
            raise TypeError(
                f"Limit key must be a non-empty str template or a callable, got {self.key!r}"
            )
        if not callable(self.limit):
            check_limit_value(self.limit, f"Limit({self.key!r}) limit")
        if self.rate is not None and not callable(self.rate):
            parse_rate(self.rate, f"Limit({self.key!r}) rate")
        check_burst(self.burst, f"Limit({self.key!r}) burst")
        if self.rate is None and self.burst != 1:
            raise ValueError(
                f"Limit({self.key!r}) burst={self.burst!r} needs a rate (without one it "
                "does nothing)"
            )


@dataclass(frozen=True)
class Need:
    """What one run needs of one listed limit: its name, limit and rate terms."""

    name: str
    limit: int
    rate: RateTerms


class ListedLimit:
    """One :class:`Limit` of one task, checked against the task's signature."""

    def __init__(self, spec: Limit, keys: KeyBuilder, task: str) -> None:
        self.spec = spec
        what = f"limits[{spec.key!r}]"
        self.keys = KeyBuilder(spec.key, keys.signature, f"task {task}: {what}")
        self.slots = PerCall(spec.limit, keys.signature, task, f"{what}.limit", check_limit_value)
        self.rate: PerCall[Rate] | None = None
        if spec.rate is not None:
            self.rate = PerCall(spec.rate, keys.signature, task, f"{what}.rate", parse_rate)

    @property
    def fixed_name(self) -> str | None:
        """Its name when it is the same for every call (a template without
        fields), else None."""
        if isinstance(self.spec.key, str) and not self.keys.fields:
            return self.spec.key
        return None

    def need(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Need:
        """What a run with these arguments needs of this limit (checked)."""
        rate = NO_RATE
        if self.rate is not None:
            rate = RateTerms(self.rate(args, kwargs), self.spec.burst, 1)
        return Need(self.keys.build(args, kwargs), self.slots(args, kwargs), rate)


def listed_limits_of(cls: Any, keys: KeyBuilder, task: str) -> tuple[ListedLimit, ...]:
    """The checked ``limits`` of a guarded task class (empty without any)."""
    specs = cls.limits
    if specs is None:
        return ()
    if isinstance(specs, Limit) or not isinstance(specs, (list, tuple)):
        raise TypeError(f"task {task}: limits must be a list of Limit, got {specs!r}")
    for spec in specs:
        if not isinstance(spec, Limit):
            raise TypeError(
                f"task {task}: limits must be a list of Limit, got an item {spec!r} "
                "(from celery_redislock import Limit)"
            )
    if not specs:
        return ()
    templates = [s.key for s in specs if isinstance(s.key, str)]
    repeated = {t for t in templates if templates.count(t) > 1}
    if repeated:
        raise ValueError(f"task {task}: limits names {sorted(repeated)[0]!r} twice")
    own = getattr(cls, cls._redislock_key_option, None)
    if isinstance(own, str) and own in templates:
        raise ValueError(
            f"task {task}: limits names the task's own key {own!r}; the own key's limit "
            f"is {'semaphore_limit' if cls._redislock_kind == 'semaphore' else 'its kind'}"
        )
    return tuple(ListedLimit(spec, keys, task) for spec in specs)
