"""Building a redis-py client from what Celery users already write.

==========================================================  ==============================
``redis://[user:password@]host[:port][/db]``                one server
``rediss://...``                                            one server over TLS (see below)
``unix://[user:password@]/path/redis.sock[?db=N]``          one server on a Unix socket
``sentinel://[:password@]host:port[;sentinel://host:port]`` the primary that Sentinel names
``...[/db]``                                                (option ``master_name`` required)
``redis+cluster://host:port[,host:port...]``                a Redis Cluster (seed nodes);
``rediss+cluster://...``                                    over TLS; or any ``redis(s)://``
                                                            URL with option ``cluster=True``
==========================================================  ==============================

``options`` (Celery: ``redislock_transport_options``) are redis-py client
arguments plus these, spelled as Celery's ``broker_transport_options`` and
``broker_use_ssl`` spell them:

* ``master_name`` (Sentinel): the monitored primary's name;
  ``sentinel_kwargs``: client arguments for the Sentinels themselves
  (e.g. their ``password``);
* ``ssl_cert_reqs`` (``required``/``optional``/``none``, also spelled
  ``CERT_REQUIRED``... or an ``ssl.VerifyMode``), ``ssl_ca_certs``,
  ``ssl_certfile``, ``ssl_keyfile``: TLS settings, allowed only with a TLS URL
  (or ``ssl=True`` for Sentinel); they may also come in the URL's query string;
* ``cluster``: ``True`` to treat a ``redis(s)://`` URL as a cluster seed;
* ``client_factory``: a callable ``(url, options) -> client``, or its dotted
  path (``"pkg.module:function"``), that builds the client instead, for set-ups
  this module does not cover (the other options are passed to it as they are).

``socket_timeout`` and ``socket_connect_timeout`` default to 5 s so that no
call (including the heartbeat's) can hang forever on a paused or unreachable
server.  Bad URLs and options raise ``ValueError``/``TypeError`` naming the
offending part, before any connection is made.
"""

from __future__ import annotations

import importlib
import inspect
import ssl
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import redis
from redis.cluster import ClusterNode
from redis.sentinel import Sentinel

__all__ = ["DEFAULT_SOCKET_TIMEOUT", "client_from_url", "resolve_factory"]

DEFAULT_SOCKET_TIMEOUT = 5.0

_SCHEMES = ("redis", "rediss", "unix", "sentinel", "redis+cluster", "rediss+cluster")
_EXPECTED = "expected " + ", ".join(f"{s}://" for s in _SCHEMES)
_SSL_KEYS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_CERT_REQS = {
    "required": "required",
    "cert_required": "required",
    "optional": "optional",
    "cert_optional": "optional",
    "none": "none",
    "cert_none": "none",
}
_OWN_KEYS = ("cluster", "master_name", "sentinel_kwargs", "client_factory")
_CLIENT_KEYS = frozenset(inspect.signature(redis.Redis.__init__).parameters) - {"self", "kwargs"}
_CLUSTER_KEYS = _CLIENT_KEYS | (
    frozenset(inspect.signature(redis.RedisCluster.__init__).parameters) - {"self", "kwargs"}
)


def client_from_url(url: str, options: Mapping[str, Any] | None = None) -> Any:
    """A redis-py client for ``url`` (see the module docstring for what is accepted)."""
    opts = dict(options or {})
    factory = opts.pop("client_factory", None)
    if factory is not None:
        return _from_factory(factory, url, opts)
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"not a Redis URL: {url!r} ({_EXPECTED})")
    scheme = url.split("://", 1)[0].lower()
    if scheme not in _SCHEMES:
        raise ValueError(
            f"unsupported Redis URL scheme {scheme!r} in {_redact(url)!r} ({_EXPECTED})"
        )
    url, opts = _ssl_from_query(url, opts)
    cluster = opts.pop("cluster", False)
    if not isinstance(cluster, bool):
        raise TypeError(f"option cluster must be True or False, got {cluster!r}")
    master_name = opts.pop("master_name", None)
    sentinel_kwargs = opts.pop("sentinel_kwargs", None)
    if scheme != "sentinel" and (master_name is not None or sentinel_kwargs is not None):
        raise ValueError(
            "options master_name / sentinel_kwargs are for sentinel:// URLs, "
            f"not {scheme}:// ({_redact(url)!r})"
        )
    tls = scheme.startswith("rediss") or (scheme == "sentinel" and opts.get("ssl") is True)
    given_ssl = [key for key in _SSL_KEYS if key in opts]
    if given_ssl and not tls:
        raise ValueError(
            f"TLS options {', '.join(given_ssl)} given for a non-TLS URL {_redact(url)!r}: "
            "use rediss:// (or ssl=True with sentinel://)"
        )
    if "ssl_cert_reqs" in opts:
        opts["ssl_cert_reqs"] = _cert_reqs(opts["ssl_cert_reqs"])
    kwargs: dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
        "socket_connect_timeout": DEFAULT_SOCKET_TIMEOUT,
        "health_check_interval": 30,
    }
    kwargs.update(opts)
    if scheme.endswith("+cluster") or cluster:
        if scheme not in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
            raise ValueError(f"cluster=True needs a redis:// or rediss:// URL, not {scheme}://")
        return _cluster(url, kwargs)
    _check_keys(kwargs, _CLIENT_KEYS)
    if scheme == "sentinel":
        return _sentinel(url, master_name, sentinel_kwargs, kwargs)
    return redis.Redis.from_url(url, **kwargs)


def resolve_factory(factory: object) -> Callable[..., Any]:
    """``factory`` itself if callable, else the callable its dotted path names."""
    if callable(factory):
        return factory
    if not isinstance(factory, str) or not factory.strip():
        raise TypeError(
            f"client_factory must be a callable or a dotted path 'pkg.module:function', "
            f"got {factory!r}"
        )
    module_name, sep, attr = factory.partition(":")
    if not sep:
        module_name, _, attr = factory.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"client_factory {factory!r} is not of the form 'pkg.module:function'")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"client_factory {factory!r}: cannot import {module_name!r}: {exc}"
        ) from exc
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"client_factory {factory!r}: {module_name!r} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"client_factory {factory!r} names {target!r}, which is not callable")
    return target  # type: ignore[no-any-return]


def _from_factory(factory: object, url: str, options: dict[str, Any]) -> Any:
    client = resolve_factory(factory)(url, options)
    if not callable(getattr(client, "evalsha", None)) or not callable(
        getattr(client, "blpop", None)
    ):
        raise TypeError(
            f"client_factory {factory!r} returned {client!r}, which is not a redis-py client "
            "(redis.Redis, a Sentinel master_for() client or redis.RedisCluster)"
        )
    return client


def _check_keys(kwargs: Mapping[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ValueError(
            f"unknown Redis client option(s) {', '.join(unknown)} "
            f"(options are redis-py client arguments plus {', '.join(_OWN_KEYS)})"
        )


def _cert_reqs(value: object) -> str:
    if isinstance(value, ssl.VerifyMode):
        return {ssl.CERT_NONE: "none", ssl.CERT_OPTIONAL: "optional"}.get(value, "required")
    if isinstance(value, str) and value.lower() in _CERT_REQS:
        return _CERT_REQS[value.lower()]
    raise ValueError(
        f"ssl_cert_reqs must be required, optional or none (or CERT_REQUIRED, CERT_OPTIONAL, "
        f"CERT_NONE, or an ssl.VerifyMode), got {value!r}"
    )


def _ssl_from_query(url: str, opts: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Move ``ssl_*`` query parameters into the options (the options win)."""
    parts = urlsplit(url)
    if not parts.query:
        return url, opts
    query = parse_qsl(parts.query, keep_blank_values=True)
    if not any(key in _SSL_KEYS for key, _ in query):
        return url, opts
    for key, value in query:
        if key in _SSL_KEYS:
            opts.setdefault(key, value)
    rest = urlencode([(k, v) for k, v in query if k not in _SSL_KEYS])
    return urlunsplit(parts._replace(query=rest)), opts


def _host_port(item: str, url: str, default_port: int) -> tuple[str, int]:
    host, _, port = item.rpartition(":") if ":" in item else (item, "", str(default_port))
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad host:port {item!r} in {_redact(url)!r}")
    return host, int(port)


def _cluster(url: str, kwargs: dict[str, Any]) -> Any:
    _check_keys(kwargs, _CLUSTER_KEYS)
    scheme, rest = url.split("://", 1)
    if scheme.lower().startswith("rediss"):
        kwargs["ssl"] = True
    parts = urlsplit("redis://" + rest)
    if parts.path not in ("", "/", "/0"):
        raise ValueError(
            f"a Redis Cluster has only database 0, not {parts.path!r}: {_redact(url)!r}"
        )
    if parts.username:
        kwargs.setdefault("username", unquote(parts.username))
    if parts.password:
        kwargs.setdefault("password", unquote(parts.password))
    hosts = parts.netloc.rpartition("@")[2]
    nodes = [
        ClusterNode(*_host_port(item, url, 6379))  # type: ignore[no-untyped-call]
        for item in hosts.split(",")
        if item
    ]
    if not nodes:
        raise ValueError(f"no cluster node in {_redact(url)!r}")
    return redis.RedisCluster(startup_nodes=nodes, **kwargs)


def _sentinel(
    url: str, master_name: object, sentinel_kwargs: object, kwargs: dict[str, Any]
) -> Any:
    if not isinstance(master_name, str) or not master_name:
        raise ValueError(
            f"a sentinel:// URL needs the option master_name (the name Sentinel monitors), "
            f"got {master_name!r}; in Celery: redislock_transport_options = "
            "{'master_name': 'mymaster'}"
        )
    if sentinel_kwargs is not None and not isinstance(sentinel_kwargs, Mapping):
        raise TypeError(f"sentinel_kwargs must be a dict, got {sentinel_kwargs!r}")
    hosts: list[tuple[str, int]] = []
    for item in url.split(";"):
        item = item.strip()
        if not item:
            continue
        if not item.lower().startswith("sentinel://"):
            raise ValueError(f"every part of a Sentinel URL must be sentinel://, got {item!r}")
        parts = urlsplit(item)
        if parts.path not in ("", "/"):
            if not parts.path.lstrip("/").isdigit():
                raise ValueError(f"bad database {parts.path!r} in {_redact(url)!r}")
            kwargs.setdefault("db", int(parts.path.lstrip("/")))
        if parts.password:
            kwargs.setdefault("password", unquote(parts.password))
        if parts.username:
            kwargs.setdefault("username", unquote(parts.username))
        hosts.append(_host_port(parts.netloc.rpartition("@")[2], url, 26379))
    sentinel_opts: dict[str, Any] = {
        "socket_timeout": kwargs["socket_timeout"],
        "socket_connect_timeout": kwargs["socket_connect_timeout"],
    }
    sentinel_opts.update(sentinel_kwargs or {})
    sentinel = Sentinel(hosts, sentinel_kwargs=sentinel_opts, **kwargs)  # type: ignore[no-untyped-call]
    return sentinel.master_for(master_name)  # type: ignore[no-untyped-call]


def _redact(url: object) -> str:
    """``url`` with any password replaced, for error messages."""
    text = str(url)
    parts = []
    for item in text.split(";"):
        split = urlsplit(item) if "://" in item else None
        if split is not None and split.password:
            netloc = split.netloc.replace(":" + split.password + "@", ":***@", 1)
            item = urlunsplit(split._replace(netloc=netloc))
        parts.append(item)
    return ";".join(parts)
