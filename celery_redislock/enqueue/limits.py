"""Task options that are a value or a callable of the call's arguments.

``semaphore_limit`` (an ``int >= 1``), ``rate`` (a rate) and ``rate_cost``
(an ``int >= 1``) are each either a value or a callable of the task's
arguments, evaluated for every run (and by the clean-up of a dead run)::

    semaphore_limit=lambda account_id, **_: plan_limit(account_id)
    rate=lambda account_id, **_: "100/m" if is_free(account_id) else "1000/m"

How the callable is called: the call's arguments are bound to the task's
signature with defaults applied, and passed **by keyword**: each parameter
the callable names gets the task argument of that name; a callable with
``**kwargs`` gets all named task parameters (plus the contents of the task's
own ``**kwargs``).  The task's ``*args`` are never passed.

Checked when the task class is created (as key templates are): every
parameter the callable names must be a parameter of the task, none may be
positional-only.  Checked at every evaluation: the result is an ``int >= 1``
(not a ``bool``), else :class:`TypeError` / :class:`ValueError` naming the
task and the arguments; the task then fails without running its body.

Not guaranteed: that the callable returns the same value for a run and for
its clean-up, or that it is cheap; it runs once per execution attempt
(every requeue of the ``retry`` policy asks again, which is what lets a
raised limit take effect at once).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..core.rate import Rate, check_burst, check_cost, parse_rate

if TYPE_CHECKING:
    from .naming import KeyBuilder

__all__ = ["PerCall", "check_limit_value", "rate_options"]

T = TypeVar("T")


def check_limit_value(value: object, what: str) -> int:
    """``value`` if it is an ``int >= 1`` (not a bool), else a precise error about ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int >= 1, got {type(value).__name__}: {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")
    return int(value)


class PerCall(Generic[T]):
    """One option of one task (``option``, its name in messages): a fixed value
    or a callable of the task's arguments, each value passed through
    ``check(value, what)``, which returns it checked or raises.

    ``signature`` is the signature of the task's ``run`` as callers see it
    (without ``self``); ``task`` names the task in error messages.
    """

    def __init__(
        self,
        spec: object,
        signature: inspect.Signature,
        task: str,
        option: str,
        check: Callable[[object, str], T],
    ) -> None:
        self.task = task
        self.signature = signature
        self.option = option
        self.check = check
        self.fixed: T | None = None
        self._function: Callable[..., Any] | None = None
        self._names: tuple[str, ...] = ()
        self._takes_all = False
        if not callable(spec):
            self.fixed = check(spec, f"task {task}: {option}")
            return
        self._function = spec
        try:
            own = inspect.signature(spec)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"task {task}: cannot read the signature of the {option} callable {spec!r}: {exc}"
            ) from exc
        task_params = {
            name: p
            for name, p in signature.parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        names = []
        for name, param in own.parameters.items():
            if param.kind is param.VAR_KEYWORD:
                self._takes_all = True
            elif param.kind is param.VAR_POSITIONAL:
                continue
            elif param.kind is param.POSITIONAL_ONLY:
                raise TypeError(
                    f"task {task}: the {option} callable's parameter {name!r} is "
                    "positional-only; it is called with the task's arguments by keyword"
                )
            elif name not in task_params:
                raise ValueError(
                    f"task {task}: the {option} callable's parameter {name!r} is not a "
                    f"parameter of the task (parameters: {', '.join(task_params) or 'none'})"
                )
            else:
                names.append(name)
        self._names = tuple(names)

    @property
    def is_callable(self) -> bool:
        return self._function is not None

    def for_call(self, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None) -> T:
        """The value of a call; without its arguments, only a fixed value has one."""
        if self._function is None:  # the common case, without a call more
            assert self.fixed is not None
            return self.fixed
        if args is None and kwargs is None:
            raise TypeError(
                f"task {self.task}: {self.option} is a callable of the task's arguments; "
                "give the call's args/kwargs (or limit=)"
            )
        return self(args or (), kwargs or {})

    def __call__(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> T:
        """The value for a call with these arguments (checked)."""
        if self._function is None:
            assert self.fixed is not None
            return self.fixed
        try:
            bound = self.signature.bind(*tuple(args or ()), **dict(kwargs or {}))
        except TypeError as exc:
            raise TypeError(
                f"task {self.task}: cannot evaluate {self.option}: arguments {args!r} "
                f"{kwargs!r} do not bind to the task's signature {self.signature}: {exc}"
            ) from exc
        bound.apply_defaults()
        given: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                if self._takes_all:
                    given.update(value)
            elif kind is not inspect.Parameter.VAR_POSITIONAL and (
                self._takes_all or name in self._names
            ):
                given[name] = value
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items())
        value = self._function(**given)
        return self.check(value, f"task {self.task}: {self.option}({shown})")


def rate_options(
    cls: type[Any], keys: KeyBuilder, task: str
) -> tuple[PerCall[Rate] | None, PerCall[int] | None]:
    """The checked ``rate`` and ``rate_cost`` of a guarded task class (None, None:
    no rate); ``lock_throttle=W`` is a rate of one start per W."""
    burst = check_burst(cls.rate_burst, f"task {task}: rate_burst")
    if cls.lock_throttle is not None:  # checked by options.validate
        if cls.rate is not None:
            raise ValueError(
                f"task {task}: lock_throttle is a rate of one start per window; set "
                "lock_throttle or rate, not both"
            )
        window = Rate(1.0, float(cls.lock_throttle))
        return PerCall(window, keys.signature, task, "rate", parse_rate), PerCall(
            1, keys.signature, task, "rate_cost", lambda value, what: check_cost(value, 1, what)
        )
    if cls.rate is None:
        if cls._redislock_kind == "rate":
            raise TypeError(f'task {task}: RateLimitedTask needs rate= (e.g. rate="20/s")')
        if burst != 1 or cls.rate_cost != 1:  # a forgotten rate= would pass unnoticed
            raise ValueError(
                f'task {task}: rate_burst and rate_cost need rate= (e.g. rate="20/s"); '
                "without it they do nothing"
            )
        return None, None
    rate = PerCall(cls.rate, keys.signature, task, "rate", parse_rate)
    cost = PerCall(
        cls.rate_cost,
        keys.signature,
        task,
        "rate_cost",
        lambda value, what: check_cost(value, burst, what),
    )
    return rate, cost
