"""Lock names from a task's arguments.

A key is either a template such as ``"cache:{user_id}"`` whose fields name
parameters of the task, or a callable ``(args, kwargs) -> str``.

Templates are checked against the task's signature when the task class is
created (a field that is not a parameter raises :class:`ValueError` then,
never when the task runs).  At call time the arguments are *bound* to the
signature with defaults applied, so ``f(7)``, ``f(user_id=7)`` and a default
all give the same key; arguments that do not bind raise :class:`TypeError`.

Canonical form of a value (deliberate choices, documented in the README, "Keys"):

* ``str``: as is, with ``%``, ``:``, ``{``, ``}`` and control characters
  percent-encoded, so values cannot forge separators or hash tags;
* ``int`` (not ``bool``): decimal, so ``7`` and ``"7"`` give the **same** key
  (ids often arrive as strings from URLs);
* ``bool``: ``true`` / ``false``; ``None``: ``null``;
* ``float``: ``repr`` (``1.0`` stays ``1.0``), NaN and infinities rejected;
* ``Decimal``: normalised (``Decimal("1.10")`` and ``Decimal("1.1")`` agree);
* ``UUID``: lower-case hyphenated form, so a UUID and its string agree;
* ``datetime``: ISO 8601; aware values are converted to UTC first, naive
  ones are used as they are; ``date`` / ``time``: ISO 8601;
* ``Enum`` members: the canonical form of their ``value``;
* anything else: :class:`TypeError` naming the parameter and the type.

Names longer than :data:`MAX_KEY_LENGTH` keep a readable head and end in a
SHA-256 digest of the whole name.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import hashlib
import inspect
import math
import re
import string
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.keys import validate_name

__all__ = ["MAX_KEY_LENGTH", "KeyBuilder", "canonical", "keys_of_task_class", "shorten"]

MAX_KEY_LENGTH = 200
_ESCAPE = {c: f"%{ord(c):02X}" for c in "%:{}"}
#: what _escape changes: most values (ids, slugs) have none of it
_NEEDS_ESCAPE = re.compile(r"[%:{}\x00-\x1f\x7f]")


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPE.get(char) or f"%{ord(char):02X}"


def _escape(text: str) -> str:
    return _NEEDS_ESCAPE.sub(_escaped, text)


def canonical(value: object, what: str = "value") -> str:
    """The canonical text of one key value; :class:`TypeError` if unsupported."""
    if isinstance(value, enum.Enum):
        return canonical(value.value, what)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return _escape(str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{what} is {value!r}: NaN and infinities cannot be part of a key")
        return repr(float(value))
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise ValueError(f"{what} is {value!r}: only finite Decimals can be part of a key")
        normal = value.normalize()
        return format(normal, "f") if normal == normal.to_integral() else str(normal)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None and value.utcoffset() is not None:
            value = value.astimezone(dt.timezone.utc)
        return _escape(value.isoformat())
    if isinstance(value, (dt.date, dt.time)):
        return _escape(value.isoformat())
    raise TypeError(
        f"{what} has type {type(value).__name__}, which has no canonical key form "
        "(supported: str, int, bool, None, float, Decimal, UUID, datetime, date, time, Enum); "
        "use a callable key for other types"
    )


def shorten(name: str) -> str:
    """``name`` if short enough, else a readable head plus a SHA-256 digest of all of it."""
    if len(name) <= MAX_KEY_LENGTH:
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()
    return f"{name[: MAX_KEY_LENGTH - len(digest) - 8]}~sha256:{digest}"


KeyFunction = Callable[[Sequence[Any], Mapping[str, Any]], str]


class KeyBuilder:
    """Builds lock names for one task from its call arguments.

    ``spec`` is a template string or a callable ``(args, kwargs) -> str``;
    ``signature`` is the signature of the task's ``run`` (without ``self``).
    """

    def __init__(self, spec: str | KeyFunction, signature: inspect.Signature, option: str) -> None:
        self.option = option
        self.signature = signature
        self.fields: tuple[str, ...] = ()
        self._parts: list[tuple[str, str | None]] = []
        if callable(spec):
            self._function: KeyFunction | None = spec
            return
        self._function = None
        if not isinstance(spec, str) or not spec:
            raise TypeError(
                f"{option} must be a non-empty str template or a callable, got {spec!r}"
            )
        try:
            parsed = list(string.Formatter().parse(spec))
        except ValueError as exc:
            raise ValueError(f"{option} {spec!r} is not a valid template: {exc}") from exc
        fields = []
        for literal, field, format_spec, conversion in parsed:
            if "{" in literal or "}" in literal:
                raise ValueError(f"{option} {spec!r}: literal braces are not allowed in lock names")
            if field is None:
                self._parts.append((literal, None))
                continue
            if not field.isidentifier() or format_spec or conversion:
                raise ValueError(
                    f"{option} {spec!r}: field {{{field}}} must be a plain parameter name "
                    "(no attributes, indexes, conversions or format specs); use a callable "
                    "key for anything more"
                )
            param = signature.parameters.get(field)
            if param is None or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ValueError(
                    f"{option} {spec!r}: {{{field}}} is not a parameter of the task "
                    f"(parameters: {', '.join(signature.parameters) or 'none'})"
                )
            self._parts.append((literal, field))
            fields.append(field)
        if not fields:
            # A constant key is allowed (one lock for every call).
            validate_name(spec)
        self.fields = tuple(fields)

    def build(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """The lock name for a call; ``TypeError``/``ValueError`` on bad arguments."""
        args = tuple(args or ())
        kwargs = dict(kwargs or {})
        if self._function is not None:
            name = self._function(args, kwargs)
            if not isinstance(name, str):
                raise TypeError(
                    f"{self.option} callable returned {type(name).__name__}, not str: {name!r}"
                )
            return validate_name(shorten(name))
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(
                f"cannot build {self.option}: arguments args={args!r} kwargs={kwargs!r} "
                f"do not bind to the task's signature {self.signature}: {exc}"
            ) from exc
        bound.apply_defaults()
        values = bound.arguments
        out = []
        for literal, field in self._parts:
            out.append(literal)
            if field is not None:
                out.append(canonical(values[field], f"argument {field!r} of {self.option}"))
        return validate_name(shorten("".join(out)))


def run_signature(run: Any, bound_self: bool) -> inspect.Signature:
    """Signature of a task's ``run`` as callers see it (``self`` dropped if bound)."""
    sig = inspect.signature(run)
    if bound_self:
        params = list(sig.parameters.values())[1:]
        sig = sig.replace(parameters=params)
    return sig


def keys_of_task_class(cls: Any, option: str) -> KeyBuilder | None:
    """The KeyBuilder of a task class whose ``run`` is defined here, else None.

    ``option`` names the class attribute holding the key (``lock_key``...);
    a class that defines ``run`` without it is a :class:`TypeError`.
    """
    run = cls.__dict__.get("run")
    if run is None:
        return None
    spec = getattr(cls, option, None)
    if spec is None:
        raise TypeError(
            f"task {getattr(cls, 'name', None) or cls.__name__}: {cls.__mro__[1].__name__} "
            f"needs {option}= (a template or a callable)"
        )
    bound_self = not isinstance(run, staticmethod)
    try:
        signature = run_signature(run if bound_self else run.__func__, bound_self)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot read the signature of {run!r}: {exc}") from exc
    return KeyBuilder(spec, signature, option)
