"""One check of the lock Redis when a Celery worker starts.

Run at ``worker_ready`` (worker.py: in the worker's main process, once,
when the worker has tasks of this library): it pings the Redis that
``redislock_url`` names, reads its version, and takes and releases a probe
lock (``<prefix>:{redislock-worker-check}``), which runs the acquire and
release scripts and so every command and key pattern the ACL must allow.
A problem is logged as one WARNING naming the redacted URL and the setting
(``redislock_url``), the worker starts anyway, and locked tasks keep failing
closed until the Redis is fixed: the check changes nothing else.

Not guaranteed: a Redis that is fine at start can fail later (each task then
logs its own one-line ERROR), and the probe cannot see permissions only the
waiting path needs (``BLPOP``) or a cluster node other than the probe's.
The probe leaves the name's fence counter behind (10 minutes).
"""

from __future__ import annotations

import logging
from typing import Any

from redis.backoff import NoBackoff
from redis.exceptions import NoPermissionError, RedisClusterException, RedisError
from redis.retry import Retry

from .core.connection import client_from_url
from .core.lock import RedisLock
from .diagnose import diagnose
from .settings import Settings, settings_from_app, unread_settings
from .settings import where as where_of

__all__ = ["MIN_REDIS_VERSION", "PROBE_NAME", "check_app", "check_at_start", "check_settings"]

log = logging.getLogger("celery_redislock")

#: ``SET ... GET`` in the scripts needs Redis 6.2
MIN_REDIS_VERSION = (6, 2)
PROBE_NAME = "redislock-worker-check"
_CONSEQUENCE = "; locked tasks fail (fail closed) until this is fixed"


def check_app(app: Any) -> list[str]:
    """The problems of ``app``'s lock Redis, one line each (empty: all well)."""
    try:
        settings = settings_from_app(app)
    except (TypeError, ValueError) as exc:
        return [f"celery-redislock: {exc}{_CONSEQUENCE}"]
    return check_settings(settings)


def check_settings(settings: Settings) -> list[str]:
    """The problems of the Redis ``settings`` name, one line each."""
    return _check(settings)[0]


def _check(settings: Settings) -> tuple[list[str], str]:
    """The problems of the Redis ``settings`` name, and that Redis named for
    messages (with a client factory: where its client connects)."""
    where = where_of(settings)
    options = dict(settings.transport_options)
    if "client_factory" not in options:
        options.setdefault("retry", Retry(NoBackoff(), 0))  # one ping, not four
    try:
        client = client_from_url(settings.url, options)
    except (TypeError, ValueError) as exc:
        return [f"celery-redislock: bad lock Redis {where}: {exc}{_CONSEQUENCE}"], where
    except (RedisError, RedisClusterException) as exc:  # a cluster client connects when built
        return [f"celery-redislock: {diagnose(exc, where).message}{_CONSEQUENCE}"], where
    where = where_of(settings, client)
    try:
        client.ping()
        problems = _version_problems(client, where)
        probe = RedisLock(client, PROBE_NAME, ttl=10.0, prefix=settings.prefix)
        if probe.acquire(blocking=False):  # False: another worker's probe holds it
            probe.release()
        return problems, where
    except (RedisError, RedisClusterException) as exc:
        return [f"celery-redislock: {diagnose(exc, where, client).message}{_CONSEQUENCE}"], where
    finally:
        if not settings.from_factory:  # the factory's client may be shared: not ours to close
            client.close()


def _version_problems(client: Any, where: str) -> list[str]:
    try:
        info = client.info("server")
    except NoPermissionError:
        return []  # INFO is not among the commands the ACL needs to allow
    infos = [info] if "redis_version" in info else [v for v in info.values() if isinstance(v, dict)]
    problems = []
    for each in infos:
        text = str(each.get("redis_version", ""))
        version = tuple(int(part) for part in text.split(".")[:2] if part.isdigit())
        if len(version) == 2 and version < MIN_REDIS_VERSION:
            needed = ".".join(map(str, MIN_REDIS_VERSION))
            problems.append(
                f"celery-redislock: the Redis at {where} is version {text}, too old: "
                f"celery-redislock needs Redis >= {needed}{_CONSEQUENCE}"
            )
    return problems


def check_at_start(app: Any) -> None:
    """At worker start (worker.py), for an app with guarded tasks: log each
    problem as one WARNING (a setting that looks like ours but is not read
    is one), or that the lock Redis is reachable, naming it."""
    for line in unread_settings(app):
        log.warning("%s", line)
    try:
        settings = settings_from_app(app)
    except (TypeError, ValueError) as exc:
        log.warning("celery-redislock: %s%s", exc, _CONSEQUENCE)
        return
    problems, where = _check(settings)
    for problem in problems:
        log.warning("%s", problem)
    if not problems:
        log.info("celery-redislock: lock Redis at %s reachable", where)
