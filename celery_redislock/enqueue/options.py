"""The task options of guarded tasks: their checks, and the per-call ones.

Class options (``lock_ttl``, ``lock_wait_timeout``, ``semaphore_limit``...)
are checked when the task class is created, so a bad value fails at
decoration (or when Celery finalizes the app), never when the task runs.
Per-call options of ``apply_async`` travel in message headers, so that the
worker-side check honours them; they are checked in ``apply_async``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from typing import Any

from ..core.validation import MAX_TTL, check_timeout, check_ttl

__all__ = [
    "CALL_OPTIONS",
    "HEADER_CLAIM_RETRY",
    "HEADER_DEDUPE",
    "HEADER_DEFERRED",
    "HEADER_PARK_TOKEN",
    "HEADER_POLICY",
    "HEADER_REQUEUES",
    "HEADER_RETRIES_FROM_REQUEUES",
    "HEADER_SENT_AT",
    "HEADER_TTL",
    "HEADER_WAIT_TIMEOUT",
    "call_headers",
    "check_delay",
    "header",
    "refuse_unknown",
    "run_options",
    "validate",
]

HEADER_POLICY = "redislock_policy"
HEADER_TTL = "redislock_ttl"
HEADER_WAIT_TIMEOUT = "redislock_wait_timeout"
HEADER_REQUEUES = "redislock_requeues"
#: set on a copy requeued to make way for an earlier delivery of its task id
#: (run/admission.py ``defer_to_earlier_delivery``)
HEADER_DEFERRED = "redislock_deferred"
#: set on a promoted copy published again because its claim failed on a
#: Redis error (run/admission.py): how often; it keeps its promotion token
HEADER_CLAIM_RETRY = "redislock_claim_retry"
#: how many of the message's Celery ``retries`` are requeues (policies/retry.py):
#: monitors count a requeue as a retry, the body's own retry budget does not
HEADER_RETRIES_FROM_REQUEUES = "redislock_retries_from_requeues"
#: when the task was called (``time.time()``), for ``redislock_wait_seconds`` (worker/metrics.py)
HEADER_SENT_AT = "redislock_sent_at"
#: set on a message that claimed (and so must clear) its enqueue marker (see enqueue/dedupe.py)
HEADER_DEDUPE = "redislock_dedupe"
#: the promotion token a promoted parked task is published with (see parking/enqueue.py)
HEADER_PARK_TOKEN = "redislock_park_token"

#: per-call options of ``apply_async`` -> the message header carrying them
CALL_OPTIONS = {
    "lock_policy": HEADER_POLICY,
    "lock_ttl": HEADER_TTL,
    "semaphore_ttl": HEADER_TTL,
    "lock_wait_timeout": HEADER_WAIT_TIMEOUT,
    "lock_dedupe": HEADER_DEDUPE,
}


def header(request: Any, name: str) -> Any:
    """A message header of ``request`` (Celery puts custom headers on the request too)."""
    value = getattr(request, name, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(name)
    return value


def check_delay(value: object, what: str) -> float:
    """``value`` as seconds from 0 to MAX_TTL (a requeue's countdown, its
    jitter): a TypeError for a value that is not a number, a ValueError for
    one out of range (NaN, infinity, negative, or so large that Celery could
    not turn it into an ETA)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or not 0 <= value <= MAX_TTL:
        raise ValueError(
            f"{what} must be a number of seconds from 0 to {MAX_TTL:.0f}, got {value!r}"
        )
    return float(value)


def validate(task: Any) -> None:
    """Check the class options of a guarded task class (policy aside)."""
    ttl = task._redislock_ttl_option()
    if ttl is not None:
        check_ttl(ttl, "lock ttl")
    check_timeout(task.lock_wait_timeout, "lock_wait_timeout")
    check_delay(task.lock_retry_countdown, "lock_retry_countdown")
    check_delay(task.lock_retry_jitter, "lock_retry_jitter")
    retry_max = task.lock_retry_max
    if retry_max is not None:
        if isinstance(retry_max, bool) or not isinstance(retry_max, int):
            raise TypeError(f"lock_retry_max must be an int >= 0 or None, got {retry_max!r}")
        if retry_max < 0:
            raise ValueError(f"lock_retry_max must be an int >= 0 or None, got {retry_max!r}")
    if not isinstance(task.lock_dedupe, bool):
        raise TypeError(f"lock_dedupe must be a bool, got {task.lock_dedupe!r}")
    check_ttl(task.lock_dedupe_ttl, "lock_dedupe_ttl")


#: prefixes of the names that are ours (or Celery's ``rate_limit``): a misspelt one is refused
OPTION_PREFIXES = ("lock_", "semaphore_", "rate")


def refuse_unknown(cls: type, library: type, siblings: tuple[type, ...]) -> None:
    """Refuse an unknown ``lock_*`` / ``semaphore_*`` / ``rate*`` option on a task class.

    ``library`` is the library class the task derives from (``LockedTask``...);
    every name with one of those prefixes that a class *between* it and ``cls``
    (the task class Celery builds, a user's base class) sets must be an option of
    ``library`` or of Celery's ``Task`` (``rate_limit``).  A misspelt option would
    otherwise be ignored silently: ``lock_polcy="wait"`` would run with the default
    policy.  Raises :class:`TypeError` naming the nearest valid option.
    """
    known = {name for name in dir(library) if name.startswith(OPTION_PREFIXES)}
    for klass in cls.__mro__:
        if klass is library or issubclass(library, klass):
            break
        for name in sorted(vars(klass)):
            if not name.startswith(OPTION_PREFIXES) or name in known:
                continue
            raise TypeError(_unknown_option_message(cls, library, siblings, name, known))


def _unknown_option_message(
    cls: type, library: type, siblings: tuple[type, ...], name: str, known: set[str]
) -> str:
    task = getattr(cls, "name", None) or cls.__name__
    where = f"task {task}: {name!r} is not an option of {library.__name__}"
    for sibling in siblings:
        if sibling is not library and hasattr(sibling, name):
            if name == getattr(sibling, "_redislock_key_option", None):
                own = getattr(library, "_redislock_key_option", "")
                return f"{where} but of {sibling.__name__}; {library.__name__} takes {own!r}"
            return f"{where} but of {sibling.__name__}: use base={sibling.__name__} for it"
    nearest = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    if nearest:
        return f"{where}; did you mean {nearest[0]!r}?"
    return f"{where} (its options: {', '.join(sorted(known))})"


def call_headers(options: dict[str, Any], check_policy: Callable[[object], str]) -> dict[str, Any]:
    """Pop the per-call options out of ``options``, checked, as message headers.

    The headers already in ``options["headers"]`` are kept (and popped too).
    """
    headers = dict(options.pop("headers", None) or {})
    stamped = set(options.get("stamped_headers") or ())
    for option in options:
        # Celery would pass a misspelt one on as a message property, unread.
        # Only a near miss is refused: other names may be a canvas stamp or a
        # mixin's own option (Celery passes stamps as options).
        if option in CALL_OPTIONS or option in stamped:
            continue
        if option.startswith(("lock_", "semaphore_")):
            nearest = difflib.get_close_matches(option, sorted(CALL_OPTIONS), n=1, cutoff=0.8)
            if nearest:
                raise TypeError(
                    f"{option!r} is not a per-call option of apply_async; "
                    f"did you mean {nearest[0]!r}?"
                )
    for option in [k for k in options if k in CALL_OPTIONS]:
        value = options.pop(option)
        if option == "lock_policy":
            check_policy(value)
        elif option in ("lock_ttl", "semaphore_ttl"):
            check_ttl(value, option)
        elif option == "lock_wait_timeout":
            check_timeout(value, option)
        elif not isinstance(value, bool):
            raise TypeError(f"lock_dedupe must be a bool, got {value!r}")
        headers[CALL_OPTIONS[option]] = value
    return headers


_ABSENT = object()


def run_options(
    request: Any, default_wait_timeout: float | None
) -> tuple[float | None, float | None]:
    """The (ttl, wait timeout) a run uses: from its message headers, else the class's."""
    ttl_header = header(request, HEADER_TTL)
    ttl = check_ttl(ttl_header, "lock ttl") if ttl_header is not None else None
    # A header of None is a call's "wait for ever", not an absent header.
    wait_header = getattr(request, HEADER_WAIT_TIMEOUT, _ABSENT)
    if wait_header is _ABSENT:
        wait_header = (getattr(request, "headers", None) or {}).get(HEADER_WAIT_TIMEOUT, _ABSENT)
    if wait_header is _ABSENT:
        return ttl, default_wait_timeout
    what = f"the {HEADER_WAIT_TIMEOUT} header"
    if isinstance(wait_header, str):  # as producers that write headers as text send it
        try:
            wait_header = float(wait_header)
        except ValueError:
            raise ValueError(f"{what} must be a number of seconds, got {wait_header!r}") from None
    return ttl, check_timeout(wait_header, what)
