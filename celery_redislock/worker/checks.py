"""One check of the lock Redis when a Celery worker starts.

Run at ``worker_ready`` (worker/lifecycle.py: in the worker's main process, once,
when the worker has tasks of this library): it pings the Redis that
``redislock_url`` names, reads its version, and takes and releases a probe
lock (``<prefix>:{redislock-worker-check}``), which runs the acquire and
release scripts and so every command and key pattern the ACL must allow,
and publishes once on the sweepers' wake channel (which the park scripts
publish on best effort, so a user denied it would otherwise learn nothing).
A problem is logged as one WARNING naming the redacted URL and the setting
(``redislock_url``), the worker starts anyway, and locked tasks keep failing
closed until the Redis is fixed: the check changes nothing else.

Not guaranteed: a Redis that is fine at start can fail later (each task then
logs its own one-line ERROR), and the probe cannot see permissions only the
waiting path needs (``BLPOP``) or a cluster node other than the probe's.
The probe leaves the name's fence counter behind (10 minutes).

Before the probe, :func:`unread_settings` names each setting that looks like
ours but that no form of the app's configuration reads (a misspelt name, a
prefix the namespace does not use), one WARNING each with the form that works.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import re
from typing import Any

from redis.backoff import NoBackoff
from redis.exceptions import NoPermissionError, RedisClusterException, RedisError
from redis.retry import Retry

from ..core.connection import client_from_url
from ..core.heartbeat import is_cluster
from ..core.keys import park_wake_channel
from ..core.lock import RedisLock
from ..diagnose import diagnose
from ..settings import (
    MISSING,
    SETTINGS,
    Settings,
    client_for,
    forms_of,
    layers_of,
    settings_from_app,
    value_in,
)
from ..settings import where as where_of

__all__ = [
    "MIN_REDIS_VERSION",
    "PROBE_NAME",
    "check_app",
    "check_at_start",
    "check_settings",
    "unread_settings",
]

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
        return problems + _wake_problems(client, settings.prefix, where), where
    except (RedisError, RedisClusterException) as exc:
        return [f"celery-redislock: {diagnose(exc, where, client).message}{_CONSEQUENCE}"], where
    finally:
        if not settings.from_factory:  # the factory's client may be shared: not ours to close
            client.close()


def _wake_problems(client: Any, prefix: str, where: str) -> list[str]:
    """Whether the user may publish on the sweepers' wake channel (one wake-up,
    harmless: a sweeper looks at the index once more).  Park scripts publish
    best effort, so without it nothing fails: promotions wait for the next
    sweep instead of starting at once."""
    if is_cluster(client):
        return []  # sweepers on a Cluster do not listen: they sweep at each interval
    channel = park_wake_channel(prefix)
    try:
        client.publish(channel, 0)
    except RedisError as exc:
        grant = (
            f"grant +publish and the channel pattern '&{prefix}:*'"
            if isinstance(exc, NoPermissionError)
            else "check the Redis (or proxy) in between"
        )
        return [
            f"celery-redislock: the lock Redis {where} refused a PUBLISH on {channel!r} "
            f"({exc}): {grant}; without it parked tasks are promoted only at each sweep "
            "(redislock_park_sweep), not at once"
        ]
    return []


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


def check_at_start(app: Any) -> bool:
    """At worker start (worker/lifecycle.py), for an app with guarded tasks: log each
    problem as one WARNING (a setting that looks like ours but is not read
    is one), or that the lock Redis is reachable, naming it.  Returns
    whether the settings can be used at all (False: the WARNING said why;
    the worker starts, its guarded tasks fail closed)."""
    for line in unread_settings(app):
        log.warning("%s", line)
    try:
        settings = settings_from_app(app)
    except (TypeError, ValueError) as exc:
        log.warning("celery-redislock: %s%s", exc, _CONSEQUENCE)
        return False
    problems, where = _check(settings)
    for problem in problems:
        log.warning("%s", problem)
    if not problems:
        log.info("celery-redislock: lock Redis at %s reachable", where)
    try:
        client_for(app)  # the client the tasks and the sweeper use
    except (TypeError, ValueError):
        return False  # a URL no client takes: _check said so
    except (RedisError, RedisClusterException):
        pass  # usable settings, a Redis down (a Cluster client connects when built)
    return True


def unread_settings(app: Any) -> list[str]:
    """One line per setting of ``app`` that looks like ours (its name holds
    ``redislock``) but is read in no form: misspelt, or under a prefix the
    app's namespace does not use.  Each names the form that works."""
    conf = app.conf
    read = {key for name in SETTINGS for key in forms_of(conf, name)}
    lines = []
    for key in sorted({str(k) for layer in layers_of(conf) for k in layer}):
        if not _LOOKS_LIKE_OURS.match(key) or key in read or not _a_value(conf, key):
            continue
        base = key.lower().removeprefix("celery_")
        guess = [base] if base in SETTINGS else _closest(base)
        if not guess:
            lines.append(f"celery-redislock: setting {key} is not read (no such setting)")
            continue
        forms = forms_of(conf, guess[0])
        right = " or ".join([f for f in forms if f.isupper() == key.isupper()] or list(forms))
        why = "misspelt" if base not in SETTINGS else "not the form this app reads"
        lines.append(f"celery-redislock: setting {key} is not read ({why}): write {right}")
    return lines


# A setting's name, not a module's (``import celery_redislock`` in a config module).
_LOOKS_LIKE_OURS = re.compile(r"^(celery_)?redislock_\w+$", re.IGNORECASE)


def _a_value(conf: Any, key: str) -> bool:
    """Whether ``key`` holds a setting's value (not a module, class or function)."""
    value = next(
        (v for layer in layers_of(conf) if (v := value_in(layer, key)) is not MISSING), None
    )
    return not (inspect.ismodule(value) or inspect.isclass(value) or inspect.isroutine(value))


def _closest(key: str) -> list[str]:
    """The setting ``key`` (lower-case, not ours) most likely meant: one whose
    words include all of its words (``redislock_ttl``: ``redislock_default_ttl``),
    else the closest spelling (``redislock_park_mx``: ``redislock_park_max``)."""
    words = set(key.split("_"))
    covering = [name for name in SETTINGS if words <= set(name.split("_"))]
    tails = {name.removeprefix("redislock_"): name for name in SETTINGS}
    close = difflib.get_close_matches(key.removeprefix("redislock_"), tails, 1, 0.75)
    return covering[:1] or [tails[tail] for tail in close]
