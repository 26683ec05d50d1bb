"""Settings read from the Celery app's configuration.

=============================  ==========================================
``redislock_url``              Redis for locks; default: the broker URL if
                               the broker is Redis (then with the broker's
                               Sentinel ``master_name``/``sentinel_kwargs``
                               and ``broker_use_ssl``), else an error
``redislock_prefix``           key prefix (default ``"redislock"``)
``redislock_default_ttl``      lease TTL in seconds (default 30)
``redislock_transport_options`` extra client options (dict; see
                               :mod:`celery_redislock.connection`)
``redislock_client_factory``   callable ``(url, options) -> client`` or its
                               dotted path; builds the client instead
=============================  ==========================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .keys import DEFAULT_PREFIX, validate_prefix

__all__ = ["Settings", "settings_from_app"]

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "sentinel://")


@dataclass(frozen=True)
class Settings:
    url: str
    prefix: str = DEFAULT_PREFIX
    default_ttl: float = 30.0
    transport_options: Mapping[str, Any] = field(default_factory=dict)


def settings_from_app(app: Any) -> Settings:
    """Read and validate the ``redislock_*`` settings of ``app``."""
    conf = app.conf
    url = conf.get("redislock_url")
    transport_options = dict(conf.get("redislock_transport_options") or {})
    if not url:
        broker = conf.get("broker_url") or ""
        if isinstance(broker, str) and broker.startswith(_REDIS_SCHEMES):
            url = broker
            transport_options = {**_broker_connection_options(conf), **transport_options}
        else:
            raise ValueError(
                "celery-redislock needs a Redis: set redislock_url in the Celery config "
                f"(the broker {broker.split('://')[0] + '://' if broker else '(none)'} "
                "is not Redis, so it cannot be the default)"
            )
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
    )


def _broker_connection_options(conf: Any) -> dict[str, Any]:
    """What the broker's own settings say about reaching it, when its URL is reused:
    Sentinel's ``master_name``/``sentinel_kwargs`` from ``broker_transport_options``
    and the TLS settings of ``broker_use_ssl``."""
    options: dict[str, Any] = {}
    transport = conf.get("broker_transport_options") or {}
    for key in ("master_name", "sentinel_kwargs"):
        if key in transport:
            options[key] = transport[key]
    use_ssl = conf.get("broker_use_ssl")
    if isinstance(use_ssl, Mapping):
        options.update(
            (key, value)
            for key, value in use_ssl.items()
            if key in ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
        )
    return options
