"""One-line explanations of what went wrong with the lock Redis.

Used by the CLI, the check at worker start and the task's fail-closed log,
so that each names the (redacted) URL and where it was configured, in one
line, and says whether the Redis is unreachable (a retry may help) or
refused what we asked (a configuration mistake: fix the setting).

Nothing here talks to Redis except :func:`sentinels_reachable`, which pings
the Sentinels of a Sentinel client once each.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

from redis.exceptions import (
    AuthenticationError,
    NoPermissionError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.sentinel import MasterNotFoundError

from .settings import client_for, where

__all__ = [
    "Diagnosis",
    "FailedClosed",
    "diagnose",
    "fail_closed",
    "one_line",
    "sentinels_reachable",
    "settings_failed",
    "short_error",
]

MAX_DETAIL = 240
_MASTER = re.compile(r"No master found for '([^']*)'")
_CLUSTER_REASON = re.compile(r"reachable node:\s*(.*)", re.S)


@dataclass(frozen=True)
class Diagnosis:
    """``message``: one line naming the URL; ``unreachable``: True when the
    Redis (Cluster, Sentinels) did not answer, False when it answered with a
    refusal that a configuration change must fix."""

    message: str
    unreachable: bool


def one_line(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` on one line (whitespace collapsed), cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def short_error(exc: BaseException) -> str:
    """The exception's class and message, on one line and short (no client reprs)."""
    if isinstance(exc, MasterNotFoundError):
        match = _MASTER.search(str(exc))
        name = match.group(1) if match else "?"
        return f"MasterNotFoundError: no Sentinel gave an address for master {name!r}"
    text = str(exc)
    if isinstance(exc, RedisClusterException):
        match = _CLUSTER_REASON.search(text)
        text = match.group(1) if match else text
    return one_line(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def sentinels_reachable(client: Any) -> bool | None:
    """For a Sentinel-managed client: whether any of its Sentinels answers a PING
    (None for other clients)."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    if manager is None:
        return None
    for sentinel in manager.sentinels:
        try:
            if sentinel.ping():
                return True
        except RedisError:
            continue
    return False


def diagnose(exc: BaseException, where: str, client: Any = None) -> Diagnosis:
    """Explain ``exc``, raised while using the Redis ``where`` describes
    (e.g. ``"redis://:***@h:6379/0 (setting redislock_url)"``)."""
    detail = short_error(exc)
    if isinstance(exc, MasterNotFoundError):
        reachable = sentinels_reachable(client) if client is not None else None
        match = _MASTER.search(str(exc))
        name = match.group(1) if match else "?"
        if reachable:
            return Diagnosis(
                f"the Sentinels at {where} know no master named {name!r}: check master_name "
                "(redislock_transport_options / broker_transport_options, or --master-name)",
                unreachable=False,
            )
        return Diagnosis(f"cannot reach any Sentinel at {where} ({detail})", unreachable=True)
    if isinstance(exc, RedisClusterException):
        if "cluster mode is not enabled" in str(exc).lower():
            return Diagnosis(
                f"{where} is a cluster URL, but the Redis there is not a cluster "
                "(Cluster mode is not enabled on this node): use redis:// for a single server",
                unreachable=False,
            )
        return Diagnosis(f"cannot reach the Redis Cluster at {where} ({detail})", True)
    if isinstance(exc, AuthenticationError):
        return Diagnosis(f"Redis at {where} refused the credentials ({detail})", False)
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
        return Diagnosis(f"cannot reach Redis at {where} ({detail})", unreachable=True)
    if isinstance(exc, NoPermissionError):
        return Diagnosis(f"Redis at {where} denied a command by ACL ({detail})", False)
    if isinstance(exc, ResponseError):
        return Diagnosis(f"Redis at {where} refused a command ({detail})", False)
    return Diagnosis(f"Redis at {where} failed ({detail})", unreachable=True)


class _MarkedMeta(type):
    def __instancecheck__(cls, instance: object) -> bool:
        return getattr(instance, "_redislock_failed_closed", False) is True


class FailedClosed(Exception, metaclass=_MarkedMeta):
    """Matches (``isinstance``) exactly the errors a guarded task re-raised
    after :func:`fail_closed` or :func:`settings_failed` logged them; never
    raised itself.

    It is the guarded tasks' default ``Task.throws``, so Celery reports such a
    failure at INFO without a traceback: the task's ERROR line already says
    which Redis and setting, and the error keeps its own type
    (``redis.exceptions.ConnectionError``...) for callers and result backends.
    """


def settings_failed(task: str, task_id: str, lock: str, exc: BaseException) -> str:
    """The one-line ERROR message for a task not run because the app's
    ``redislock_*`` settings (or the broker they default to) cannot be used;
    marks ``exc`` as :class:`FailedClosed`, so Celery adds no traceback.  The
    worker's start check has said the same in one WARNING."""
    with contextlib.suppress(AttributeError):
        setattr(exc, "_redislock_failed_closed", True)  # noqa: B010 (a marker, see FailedClosed)
    return f"{task}[{task_id}] not run, lock {lock!r}: settings (fail closed): {exc}"


def fail_closed(app: Any, task: str, task_id: str, lock: str, exc: BaseException) -> str:
    """The one-line ERROR message for a task not run because its lock Redis
    failed: names the task, the lock, the redacted URL and its setting.  Marks
    ``exc`` as :class:`FailedClosed`."""
    with contextlib.suppress(AttributeError):
        setattr(exc, "_redislock_failed_closed", True)  # noqa: B010 (a marker, see FailedClosed)
    try:
        client, settings = client_for(app)
        place = where(settings, client)
    except (TypeError, ValueError, RedisError, RedisClusterException):
        place = "the lock Redis (setting redislock_url)"
    found = diagnose(exc, place)
    what = "unreachable" if found.unreachable else "refused"
    return f"{task}[{task_id}] not run, lock {lock!r}: Redis {what} (fail closed): {found.message}"
