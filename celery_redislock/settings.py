"""Settings read from the Celery app's configuration, and the client built from them.

=============================  ==========================================
``redislock_url``              Redis for locks; default: the broker URL if
                               the broker is Redis (then with the broker's
                               Sentinel ``master_name``/``sentinel_kwargs``/
                               ``min_other_sentinels`` and ``broker_use_ssl``),
                               else an error
``redislock_prefix``           key prefix (default ``"redislock"``)
``redislock_default_ttl``      lease TTL in seconds (default 30)
``redislock_transport_options`` extra client options (dict; see
                               :mod:`celery_redislock.core.connection`)
``redislock_client_factory``   callable ``(url, options) -> client`` or its
                               dotted path; builds the client instead
``redislock_park_deadline``    ``park``: seconds a promoted message may take
                               to arrive (default 60)
``redislock_park_max``         ``park``: most tasks parked per name (0: none)
``redislock_park_max_total``   ``park``: most parked over all names (0: none)
``redislock_park_sweep_interval`` ``park``: seconds between sweeps (default 1)
``redislock_park_max_publishes``  ``park``: publishes before a promoted task
                               nobody starts is given up (default 10)
``redislock_allow_green_pool`` run guarded tasks under gevent/eventlet anyway
=============================  ==========================================

Every setting is read here and nowhere else, validated once per app and
process (:func:`client_for` caches the result); a bad value is a
``ValueError`` naming the setting.  The README's settings table lists the
same settings (a test compares them).

A ``sentinel://`` ``redislock_url`` of its own takes the Sentinel options
(``master_name``...) from ``redislock_transport_options``, else from
``broker_transport_options``; no other broker option is inherited by a URL
of its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .core.connection import client_from_url, scheme_of
from .core.keys import DEFAULT_PREFIX, validate_prefix
from .core.park import ParkConfig

__all__ = ["Settings", "client_for", "park_settings", "reset", "settings_for", "settings_from_app"]

# Broker URL schemes that name a Redis (kombu's, and the result backend's socket forms).
_BROKER_SCHEMES = ("redis", "rediss", "redis+socket", "socket", "unix", "sentinel")
_SENTINEL_KEYS = ("master_name", "sentinel_kwargs", "min_other_sentinels")
_SSL_KEYS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


@dataclass(frozen=True)
class Settings:
    url: str
    prefix: str = DEFAULT_PREFIX
    default_ttl: float = 30.0
    transport_options: Mapping[str, Any] = field(default_factory=dict)
    #: where ``url`` came from, for messages: ``"redislock_url"``, ``"broker_url"``
    #: (``redislock_url`` unset) or ``"--url"`` (the CLI)
    url_setting: str = "redislock_url"
    park: ParkConfig = field(default_factory=ParkConfig)
    allow_green_pool: bool = False
    #: ``redislock_metrics_port`` (None: no metrics) and ``redislock_metrics_host``
    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"

    @property
    def url_origin(self) -> str:
        """Names the setting behind :attr:`url`, e.g. ``setting redislock_url``."""
        if self.url_setting == "broker_url":
            return "setting redislock_url (unset, so the broker_url is used)"
        if self.url_setting.startswith("-"):
            return f"option {self.url_setting}"
        return f"setting {self.url_setting}"


def settings_from_app(app: Any, url: str | None = None) -> Settings:
    """Read and validate the ``redislock_*`` settings of ``app``.

    ``url`` (the CLI's ``--url``) replaces ``redislock_url``; it keeps the
    Sentinel options of the app's settings when it is a ``sentinel://`` URL.
    """
    conf = app.conf
    setting = "--url" if url else "redislock_url"
    url = url or conf.get("redislock_url")
    transport_options = dict(conf.get("redislock_transport_options") or {})
    if not url:
        broker = conf.get("broker_url") or ""
        if isinstance(broker, str) and scheme_of(broker) in _BROKER_SCHEMES:
            url, setting = broker, "broker_url"
            transport_options = {**_broker_connection_options(conf), **transport_options}
        else:
            raise ValueError(
                "celery-redislock needs a Redis: set redislock_url in the Celery config "
                f"(the broker {scheme_of(broker) + '://' if broker else '(none)'} "
                "is not Redis, so it cannot be the default)"
            )
    elif scheme_of(url) == "sentinel":
        broker_transport = conf.get("broker_transport_options") or {}
        for key in _SENTINEL_KEYS:
            if key not in transport_options and key in broker_transport:
                transport_options[key] = broker_transport[key]
    if setting == "--url" and scheme_of(url) != "sentinel":
        # Options written for the app's own Redis may not fit another URL.
        for key in _SENTINEL_KEYS:
            transport_options.pop(key, None)
    ttl = conf.get("redislock_default_ttl", 30.0)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0:
        raise ValueError(f"redislock_default_ttl must be a positive number of seconds: {ttl!r}")
    factory = conf.get("redislock_client_factory")
    if factory is not None:
        transport_options["client_factory"] = factory
    return Settings(
        url=url,
        prefix=validate_prefix(conf.get("redislock_prefix", DEFAULT_PREFIX)),
        default_ttl=float(ttl),
        transport_options=transport_options,
        url_setting=setting,
        park=park_settings(app),
        allow_green_pool=bool(conf.get("redislock_allow_green_pool", False)),
        **metrics_settings(app),
    )


def metrics_settings(app: Any) -> dict[str, Any]:
    """``redislock_metrics_port`` (an int 1..65535, or None: off) and
    ``redislock_metrics_host`` (default ``"0.0.0.0"``), validated."""
    conf = app.conf
    port = conf.get("redislock_metrics_port")
    host = conf.get("redislock_metrics_host", "0.0.0.0")
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536
    ):
        raise ValueError(f"redislock_metrics_port must be a TCP port (1-65535) or None: {port!r}")
    if not isinstance(host, str) or not host:
        raise ValueError(f"redislock_metrics_host must be a host name or address: {host!r}")
    return {"metrics_port": port, "metrics_host": host}


def park_settings(app: Any) -> ParkConfig:
    """``redislock_park_deadline``, ``redislock_park_max``, ``redislock_park_max_total``,
    ``redislock_park_sweep_interval``, ``redislock_park_max_publishes``, validated."""
    conf = app.conf
    deadline = conf.get("redislock_park_deadline", 60.0)
    max_parked = conf.get("redislock_park_max", 0) or 0
    max_total = conf.get("redislock_park_max_total", 0) or 0
    interval = conf.get("redislock_park_sweep_interval", 1.0)
    max_publishes = conf.get("redislock_park_max_publishes", 10)
    seconds = (("redislock_park_deadline", deadline), ("redislock_park_sweep_interval", interval))
    for what, value in seconds:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
    counts = (("redislock_park_max", max_parked), ("redislock_park_max_total", max_total))
    for what, count in counts:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{what} must be an int >= 0, got {count!r}")
    if isinstance(max_publishes, bool) or not isinstance(max_publishes, int) or max_publishes < 1:
        raise ValueError(f"redislock_park_max_publishes must be an int >= 1, got {max_publishes!r}")
    return ParkConfig(float(deadline), max_parked, float(interval), max_total, max_publishes)


def _broker_connection_options(conf: Any) -> dict[str, Any]:
    """What the broker's own settings say about reaching it, when its URL is reused:
    the Sentinel options of ``broker_transport_options`` and the TLS settings of
    ``broker_use_ssl``."""
    options: dict[str, Any] = {}
    transport = conf.get("broker_transport_options") or {}
    for key in _SENTINEL_KEYS:
        if key in transport:
            options[key] = transport[key]
    use_ssl = conf.get("broker_use_ssl")
    if isinstance(use_ssl, Mapping):
        options.update((key, value) for key, value in use_ssl.items() if key in _SSL_KEYS)
    return options


# -- one Redis client per process and app -----------------------------------
# Built lazily on first use, and rebuilt in a forked child (a client is never
# shared across a fork).

_lock = threading.Lock()
_cache: dict[int, tuple[int, Any, Settings, Any]] = {}


def client_for(app: Any) -> tuple[Any, Settings]:
    """The process's client and settings for ``app``."""
    pid = os.getpid()
    entry = _cache.get(id(app))
    if entry is not None and entry[0] == pid and entry[1] is app:
        return entry[3], entry[2]
    with _lock:
        entry = _cache.get(id(app))
        if entry is not None and entry[0] == pid and entry[1] is app:
            return entry[3], entry[2]
        settings = settings_from_app(app)
        client = client_from_url(settings.url, settings.transport_options)
        _cache[id(app)] = (pid, app, settings, client)
        return client, settings


def settings_for(app: Any) -> Settings:
    """The process's settings for ``app`` (parsed once, with its client)."""
    return client_for(app)[1]


def reset() -> None:
    """Forget every cached client (tests that change settings)."""
    with _lock:
        _cache.clear()
