"""Settings read from the Celery app's configuration, and the client built from them.

=============================  ==========================================
``redislock_url``              Redis for locks; default: the broker URL if
                               the broker is Redis (then with the broker's
                               Sentinel ``master_name``/``sentinel_kwargs``/
                               ``min_other_sentinels`` and ``broker_use_ssl``),
                               else an error (with a client factory: ``""``)
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

**Where a setting is read from**, in every form ``config_from_object``
accepts (:func:`setting`): the lower-case name (``redislock_url``); under a
namespace (``config_from_object(..., namespace="CELERY")``) the prefixed
upper-case name (``CELERY_REDISLOCK_URL``); without a namespace also the
old-style upper-case names ``REDISLOCK_URL`` and ``CELERY_REDISLOCK_URL``
(Django projects that load their settings without a namespace).  Two forms
with different values are a ``ValueError``.  A setting that looks like ours
but is read in no form (misspelt, or a prefix the namespace does not use) is
named by ``worker/checks.py`` ``unread_settings``, which the worker logs at start.

**The broker** behind the default ``redislock_url`` is resolved as Celery
resolves it (``app.conf.broker_write_url``: ``CELERY_BROKER_WRITE_URL``,
``broker_write_url``, ``CELERY_BROKER_URL`` (which ``celery -b`` sets),
``broker_url``).  Of a failover list (``redis://a;redis://b`` or a list) the
locks use the first URL only: a lock must live on one server, and a lock
taken on a failover server would not exclude a holder on the first.  A
``sentinel://`` list is one Sentinel set, kept whole.

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

from .core.address import address_of
from .core.connection import client_from_url, redact, scheme_of
from .core.keys import DEFAULT_PREFIX, validate_prefix
from .core.park import ParkConfig

__all__ = [
    "MISSING",
    "SETTINGS",
    "Settings",
    "broker_url",
    "client_for",
    "forms_of",
    "layers_of",
    "named",
    "park_settings",
    "reset",
    "setting",
    "settings_for",
    "settings_from_app",
    "value_in",
    "where",
]

#: every setting this module reads (the README's table lists the same)
SETTINGS = (
    "redislock_url",
    "redislock_prefix",
    "redislock_default_ttl",
    "redislock_transport_options",
    "redislock_client_factory",
    "redislock_park_deadline",
    "redislock_park_max",
    "redislock_park_max_total",
    "redislock_park_sweep_interval",
    "redislock_park_max_publishes",
    "redislock_allow_green_pool",
    "redislock_metrics_port",
    "redislock_metrics_host",
)

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
    #: where ``url`` came from, for messages: the form of ``redislock_url`` that
    #: was read (``"REDISLOCK_URL"``...), the broker setting or variable
    #: behind it (``"broker_url"``, ``"CELERY_BROKER_URL"``...; ``redislock_url``
    #: unset) or ``"--url"`` (the CLI)
    url_setting: str = "redislock_url"
    park: ParkConfig = field(default_factory=ParkConfig)
    allow_green_pool: bool = False
    #: ``redislock_metrics_port`` (None: no metrics) and ``redislock_metrics_host``
    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"

    @property
    def url_origin(self) -> str:
        """Names the setting behind :attr:`url`, e.g. ``setting redislock_url``."""
        if self.is_broker:
            return f"setting redislock_url unset, so the broker's is used: {self.url_setting}"
        if self.url_setting.startswith("-"):
            return f"option {self.url_setting}"
        return f"setting {self.url_setting}"

    @property
    def is_broker(self) -> bool:
        """Whether :attr:`url` is the broker's (``redislock_url`` unset)."""
        return self.url_setting in _BROKER_SOURCES

    @property
    def from_factory(self) -> bool:
        """Whether ``redislock_client_factory`` builds the client (then :attr:`url`
        is only what the factory is given, not necessarily where it connects)."""
        return "client_factory" in self.transport_options


# Where Celery's ``broker_write_url`` comes from, in the order Celery reads them.
_BROKER_SOURCES = {
    "CELERY_BROKER_WRITE_URL": "CELERY_BROKER_WRITE_URL in the environment",
    "broker_write_url": "setting broker_write_url",
    "CELERY_BROKER_URL": "CELERY_BROKER_URL in the environment (celery -b sets it)",
    "broker_url": "setting broker_url",
    "broker_host": "setting broker_host (Celery's older name of broker_url)",
}


def forms_of(conf: Any, name: str) -> tuple[str, ...]:
    """The keys ``name`` is read from in ``conf`` (see the module docstring)."""
    conf.get(name)  # a read loads a pending configuration, and with it the namespace
    namespace = getattr(conf, "prefix", None)  # "CELERY_" under namespace="CELERY"
    if namespace:
        prefixed = namespace + name
        return (prefixed.upper() if namespace.isupper() else prefixed.lower(), name)
    return (name, name.upper(), "CELERY_" + name.upper())


def layers_of(conf: Any) -> list[Any]:
    """The layers of ``conf`` in Celery's order: the changes made at run time
    (``app.conf.update``) first, then the configuration object, then defaults."""
    return list(getattr(conf, "maps", None) or [conf])


def value_in(layer: Any, key: str) -> Any:
    try:
        return layer[key]
    except (KeyError, AttributeError):
        return MISSING


MISSING = object()


def setting(conf: Any, name: str, default: Any = None) -> tuple[Any, str]:
    """``(value, the key it was read from)`` of our setting ``name`` (lower-case,
    e.g. ``"redislock_url"``) in every form the app's configuration accepts;
    ``(default, name)`` when unset.  As in Celery, a layer wins over the ones
    below it (``app.conf.update(redislock_url=...)`` over the settings module,
    in any spelling); two forms in one layer with different values are a
    ``ValueError`` naming both."""
    forms = forms_of(conf, name)
    for layer in layers_of(conf):
        values = ((key, value_in(layer, key)) for key in forms)
        found = [(key, value) for key, value in values if value is not MISSING]
        if not found:
            continue
        (key, value), *others = found
        for other, other_value in others:
            if other_value != value:
                raise ValueError(
                    f"{key} and {other} are both set, to different values ({value!r} and "
                    f"{other_value!r}): keep one"
                )
        return value, key
    return default, name


def _broker(conf: Any) -> tuple[str, str]:
    """The broker URL Celery writes to, resolved as Celery resolves it, and
    where it came from (a key of :data:`_BROKER_SOURCES`)."""
    for source in _BROKER_SOURCES:
        if source == "broker_host" and conf.get("broker_url") is not None:
            return "", "broker_url"  # Celery's first(): a broker_url of "" hides broker_host
        value = os.environ.get(source) if source.isupper() else conf.get(source)
        if value:
            break
    else:
        return "", "broker_url"
    if isinstance(value, (list, tuple)):  # kombu's list: a failover list, or Sentinels
        urls = [str(url) for url in value]
        sentinels = bool(urls) and all(scheme_of(url) == "sentinel" for url in urls)
        value = ";".join(urls) if sentinels else (urls[0] if urls else "")
    if isinstance(value, str) and ";" in value and scheme_of(value) != "sentinel":
        value = value.split(";", 1)[0].strip()  # the first of a failover list
    return (value if isinstance(value, str) else ""), source


def broker_url(app: Any) -> str:
    """The URL of ``app``'s broker, as Celery resolves it (the first of a
    failover list); ``""`` when none is set."""
    return _broker(app.conf)[0]


def settings_from_app(app: Any, url: str | None = None) -> Settings:
    """Read and validate the ``redislock_*`` settings of ``app``.

    ``url`` (the CLI's ``--url``) replaces ``redislock_url``; it keeps the
    Sentinel options of the app's settings when it is a ``sentinel://`` URL.
    """
    conf = app.conf
    if url:
        setting_name = "--url"
    else:
        url, setting_name = setting(conf, "redislock_url")
    transport_options = dict(setting(conf, "redislock_transport_options")[0] or {})
    factory, factory_setting = setting(conf, "redislock_client_factory")
    if not url:
        broker, source = _broker(conf)
        if scheme_of(broker) in _BROKER_SCHEMES:
            url, setting_name = broker, source
            transport_options = {**_broker_connection_options(conf), **transport_options}
        elif factory is not None:
            # The factory builds the client: it is given "" for a URL.
            url, setting_name = "", factory_setting
        else:
            if broker and "://" not in broker:  # broker_host in its old sense, a host name
                why = f"the broker {broker!r} ({_BROKER_SOURCES[source]}) is not a URL"
            else:
                shown = (
                    f"{scheme_of(broker)}:// ({_BROKER_SOURCES[source]})" if broker else "(none)"
                )
                why = f"the broker {shown} is not Redis"
            raise ValueError(
                "celery-redislock needs a Redis: set redislock_url in the Celery config "
                f"({why}, so it cannot be the default)"
            )
    elif scheme_of(url) == "sentinel":
        broker_transport = conf.get("broker_transport_options") or {}
        for key in _SENTINEL_KEYS:
            if key not in transport_options and key in broker_transport:
                transport_options[key] = broker_transport[key]
    if setting_name == "--url" and scheme_of(url) != "sentinel":
        # Options written for the app's own Redis may not fit another URL.
        for key in _SENTINEL_KEYS:
            transport_options.pop(key, None)
    ttl, ttl_key = setting(conf, "redislock_default_ttl", 30.0)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0:
        raise ValueError(f"{ttl_key} must be a positive number of seconds: {ttl!r}")
    if factory is not None:
        transport_options["client_factory"] = factory
    return Settings(
        url=url,
        prefix=validate_prefix(setting(conf, "redislock_prefix", DEFAULT_PREFIX)[0]),
        default_ttl=float(ttl),
        transport_options=transport_options,
        url_setting=setting_name,
        park=park_settings(app),
        allow_green_pool=bool(setting(conf, "redislock_allow_green_pool", False)[0]),
        **metrics_settings(app),
    )


def named(settings: Settings, client: Any = None) -> tuple[str, str]:
    """The Redis ``settings`` name, for messages, and where it came from: the
    redacted URL and its setting; with ``redislock_client_factory``, the
    address the factory's ``client`` connects to (``settings.url`` is only
    what the factory was given)."""
    if settings.from_factory and client is not None:
        return address_of(client), "the client of setting redislock_client_factory"
    return redact(settings.url) or "(no URL)", settings.url_origin


def where(settings: Settings, client: Any = None) -> str:
    """:func:`named` as one phrase: ``redis://host:6379/0 (setting redislock_url)``."""
    return "{} ({})".format(*named(settings, client))


def metrics_settings(app: Any) -> dict[str, Any]:
    """``redislock_metrics_port`` (an int 1..65535, or None: off) and
    ``redislock_metrics_host`` (default ``"0.0.0.0"``), validated."""
    conf = app.conf
    port = setting(conf, "redislock_metrics_port")[0]
    host = setting(conf, "redislock_metrics_host", "0.0.0.0")[0]
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
    deadline = setting(conf, "redislock_park_deadline", 60.0)[0]
    max_parked = setting(conf, "redislock_park_max", 0)[0] or 0
    max_total = setting(conf, "redislock_park_max_total", 0)[0] or 0
    interval = setting(conf, "redislock_park_sweep_interval", 1.0)[0]
    max_publishes = setting(conf, "redislock_park_max_publishes", 10)[0]
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
