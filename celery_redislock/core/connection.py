"""Building a redis-py client from what Celery users already write.

Every Redis URL form the Celery broker (kombu) and result backend accept:

==========================================================  ==============================
``redis://[user:password@]host[:port][/db][?opts]``         one server
``rediss://...``                                            one server over TLS (see below)
``redis+socket:///path/redis.sock[?db=N&opts]``             one server on a Unix socket
``socket:///path/redis.sock...``, ``unix:///path...``       the same (``virtual_host=N``
                                                            is accepted for ``db=N``)
``sentinel://[:password@]host:port[;sentinel://host:port]`` the primary that Sentinel names
``...[/db][?opts]``                                         (option ``master_name`` required)
``redis+cluster://host:port[,host:port...]``                a Redis Cluster (seed nodes);
``rediss+cluster://...``                                    over TLS; or any ``redis(s)://``
                                                            URL with option ``cluster=True``
==========================================================  ==============================

The query string (``?socket_timeout=2&ssl_cert_reqs=none``) carries redis-py
client arguments, converted as redis-py's own ``from_url`` converts them; a
query value wins over the same key in ``options`` (as in redis-py and kombu).

``options`` (Celery: ``redislock_transport_options``) are redis-py client
arguments plus these, spelled as Celery's ``broker_transport_options`` and
``broker_use_ssl`` spell them:

* ``master_name`` (Sentinel): the monitored primary's name;
  ``sentinel_kwargs``: client arguments for the Sentinels themselves
  (e.g. their ``password``); ``min_other_sentinels`` as in kombu;
* ``ssl_cert_reqs`` (``required``/``optional``/``none``, also spelled
  ``CERT_REQUIRED``... or an ``ssl.VerifyMode``), ``ssl_ca_certs``,
  ``ssl_certfile``, ``ssl_keyfile``: TLS settings.  As in kombu, giving any of
  them (in the options or the query) turns a ``redis://`` URL into TLS and a
  ``sentinel://`` one into TLS to the primary; on a Unix socket they are an error;
* ``cluster``: ``True`` to treat a ``redis(s)://`` URL as a cluster seed;
* ``client_factory``: a callable ``(url, options) -> client``, or its dotted
  path (``"pkg.module:function"``), that builds the client instead, for set-ups
  this module does not cover (the other options are passed to it as they are).

``socket_timeout`` and ``socket_connect_timeout`` default to 5 s so that no
call (including the heartbeat's) can hang forever on a paused or unreachable
server.  Bad URLs and options raise ``ValueError``/``TypeError`` naming the
offending part and the URL (password masked by :func:`redact`), before any
connection is made, except for a Redis Cluster: redis-py asks the seed nodes
for the topology when the client is built, so an unreachable cluster (or a
cluster URL at a server that is not a cluster) raises
``redis.exceptions.RedisClusterException`` here.
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
from redis.connection import URL_QUERY_ARGUMENT_PARSERS
from redis.sentinel import Sentinel

__all__ = ["DEFAULT_SOCKET_TIMEOUT", "client_from_url", "redact", "resolve_factory", "scheme_of"]

DEFAULT_SOCKET_TIMEOUT = 5.0

_UNIX_SCHEMES = ("redis+socket", "socket", "unix")
_SCHEMES = ("redis", "rediss", *_UNIX_SCHEMES, "sentinel", "redis+cluster", "rediss+cluster")
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
_SENTINEL_KEYS = ("master_name", "sentinel_kwargs", "min_other_sentinels")
_OWN_KEYS = ("cluster", *_SENTINEL_KEYS, "client_factory")
_CLIENT_KEYS = frozenset(inspect.signature(redis.Redis.__init__).parameters) - {"self", "kwargs"}
_CLUSTER_KEYS = _CLIENT_KEYS | (
    frozenset(inspect.signature(redis.RedisCluster.__init__).parameters) - {"self", "kwargs"}
)
_OWN_PARSERS: dict[str, Callable[[str], Any]] = {
    "min_other_sentinels": int,
    "cluster": lambda value: value.lower() in ("1", "true", "yes"),
}
# Client arguments a Unix-socket connection does not take.
_TCP_ONLY = frozenset({"host", "port", "ssl", "socket_keepalive", "socket_keepalive_options"}) | {
    key for key in _CLIENT_KEYS if key.startswith("ssl_")
}


def scheme_of(url: str) -> str:
    """The lower-cased scheme of ``url`` (``""`` if it has none)."""
    return url.split("://", 1)[0].lower() if isinstance(url, str) and "://" in url else ""


def client_from_url(url: str, options: Mapping[str, Any] | None = None) -> Any:
    """A redis-py client for ``url`` (see the module docstring for what is accepted)."""
    opts = dict(options or {})
    factory = opts.pop("client_factory", None)
    if factory is not None:
        return _from_factory(factory, url, opts)
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"not a Redis URL: {redact(url)!r} ({_EXPECTED})")
    scheme = scheme_of(url)
    if scheme not in _SCHEMES:
        raise ValueError(
            f"unsupported Redis URL scheme {scheme!r} in {redact(url)!r} ({_EXPECTED})"
        )
    url, opts = _query_to_options(url, scheme, opts)
    cluster = opts.pop("cluster", False)
    if not isinstance(cluster, bool):
        raise TypeError(f"option cluster must be True or False, got {cluster!r}")
    sentinel_opts = {key: opts.pop(key) for key in _SENTINEL_KEYS if key in opts}
    if scheme != "sentinel" and sentinel_opts:
        raise ValueError(
            f"options {' / '.join(sentinel_opts)} are for sentinel:// URLs, "
            f"not {scheme}:// ({redact(url)!r})"
        )
    given_ssl = [key for key in _SSL_KEYS if key in opts]
    if given_ssl and scheme in _UNIX_SCHEMES:
        raise ValueError(
            f"TLS options {', '.join(given_ssl)} given for a Unix socket URL {redact(url)!r}: "
            "TLS needs rediss:// (or redis:// with TLS options)"
        )
    if given_ssl and scheme in ("redis", "redis+cluster"):
        # kombu's rule: TLS settings on a redis:// URL mean TLS.
        scheme = "rediss" if scheme == "redis" else "rediss+cluster"
        url = scheme + url[url.index("://") :]
    if given_ssl and scheme == "sentinel":
        opts.setdefault("ssl", True)
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
            raise ValueError(
                f"cluster=True needs a redis:// or rediss:// URL, not {scheme}:// ({redact(url)!r})"
            )
        return _cluster(url, kwargs)
    if scheme == "sentinel":
        _check_keys(kwargs, _CLIENT_KEYS, url)
        return _sentinel(url, sentinel_opts, kwargs)
    if scheme in _UNIX_SCHEMES:
        return _unix(url, kwargs)
    _check_keys(kwargs, _CLIENT_KEYS, url)
    _host_port_of(url)
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


def redact(url: object) -> str:
    """``url`` with every password (in the user part or the query) replaced by ``***``.

    Works on ``;``-joined Sentinel lists and ``,``-joined cluster seeds, and
    never raises, however malformed the URL (it is used in error messages).
    """
    text = str(url)
    return ";".join(_redact_one(item) for item in text.split(";"))


def _redact_one(item: str) -> str:
    scheme, sep, rest = item.partition("://")
    if not sep:
        return item
    netloc, slash, tail = rest.partition("/")
    if "?" in netloc:  # no path: the query follows the host directly
        netloc, _, query = netloc.partition("?")
        slash, tail = "", "?" + query
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        if ":" in userinfo:
            netloc = userinfo.split(":", 1)[0] + ":***@" + hosts
    path, qmark, query = tail.partition("?")
    if qmark:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, "***" if k.lower() == "password" else v) for k, v in pairs], safe="*/:"
        )
    return f"{scheme}{sep}{netloc}{slash}{path}{qmark}{query}"


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


def _check_keys(kwargs: Mapping[str, Any], allowed: frozenset[str], url: str) -> None:
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ValueError(
            f"unknown Redis client option(s) {', '.join(unknown)} for {redact(url)!r} "
            f"(options and URL query parameters are redis-py client arguments plus "
            f"{', '.join(_OWN_KEYS)})"
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


def _query_to_options(url: str, scheme: str, opts: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Move the query parameters (of every part of a Sentinel list) into the
    options, converted as redis-py converts them; the URL wins.  As in
    redis-py's ``from_url``, a ``db`` in the query wins over the path's
    ``/N`` (the path is dropped from a ``redis://``, ``rediss://`` or
    ``sentinel://`` URL, where it would override the option; a Cluster's
    path is still checked for database 0)."""
    items = url.split(";") if scheme == "sentinel" else [url]
    bare: list[str] = []
    for item in items:
        parts = urlsplit(item)
        query = parse_qsl(parts.query, keep_blank_values=True)
        keys = {key for key, _ in query}
        if scheme in ("redis", "rediss", "sentinel") and "db" in keys and "cluster" not in keys:
            parts = parts._replace(path="")
        bare.append(urlunsplit(parts._replace(query="")))
        for key, value in query:
            if key == "virtual_host":
                if scheme not in _UNIX_SCHEMES:
                    raise ValueError(
                        f"virtual_host is for Unix socket URLs; use the path /N for the "
                        f"database in {redact(url)!r}"
                    )
                key = "db"
            parser: Callable[[str], Any] | None = _OWN_PARSERS.get(key)
            if parser is None:
                parser = URL_QUERY_ARGUMENT_PARSERS.get(key)  # type: ignore[assignment]
            try:
                opts[key] = parser(value) if parser is not None else value
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"bad value {value!r} for {key} in the query of {redact(url)!r}: {exc}"
                ) from None
    return ";".join(bare), opts


def _port_of(parts: Any, url: str) -> int | None:
    try:
        port: int | None = parts.port
    except ValueError:
        raise ValueError(
            f"bad port in {redact(url)!r}: {parts.netloc.rpartition('@')[2]!r} is not "
            "host:port with a port number 1-65535"
        ) from None
    return port


def _db_of(path: str, url: str) -> int | None:
    db = path.strip("/")
    if not db:
        return None
    if not db.isdigit():
        raise ValueError(f"bad database {path!r} in {redact(url)!r} (expected /0, /1, ...)")
    return int(db)


def _host_port_of(url: str) -> None:
    """Check a ``redis(s)://`` URL's port and database, naming the URL."""
    parts = urlsplit(url)
    _port_of(parts, url)
    _db_of(parts.path, url)


def _unix(url: str, kwargs: dict[str, Any]) -> Any:
    parts = urlsplit(url)
    path = unquote(parts.path)
    if not path or path == "/":
        raise ValueError(f"no socket path in {redact(url)!r} (expected redis+socket:///path.sock)")
    for key in sorted(_TCP_ONLY & set(kwargs)):
        raise ValueError(f"option {key} does not apply to a Unix socket ({redact(url)!r})")
    _check_keys(kwargs, _CLIENT_KEYS, url)
    if parts.username:
        kwargs.setdefault("username", unquote(parts.username))
    if parts.password:
        kwargs.setdefault("password", unquote(parts.password))
    return redis.Redis(unix_socket_path=path, **kwargs)


def _host_port(item: str, url: str, default_port: int) -> tuple[str, int]:
    host, _, port = item.rpartition(":") if ":" in item else (item, "", str(default_port))
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad host:port {item!r} in {redact(url)!r}")
    return host, int(port)


def _cluster(url: str, kwargs: dict[str, Any]) -> Any:
    _check_keys(kwargs, _CLUSTER_KEYS, url)
    scheme, rest = url.split("://", 1)
    if scheme.lower().startswith("rediss"):
        kwargs["ssl"] = True
    parts = urlsplit("redis://" + rest)
    if parts.path not in ("", "/", "/0"):
        raise ValueError(
            f"a Redis Cluster has only database 0, not {parts.path!r}: {redact(url)!r}"
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
        raise ValueError(f"no cluster node in {redact(url)!r}")
    return redis.RedisCluster(startup_nodes=nodes, **kwargs)


def _sentinel(url: str, sentinel_opts: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    master_name = sentinel_opts.get("master_name")
    sentinel_kwargs = sentinel_opts.get("sentinel_kwargs")
    if not isinstance(master_name, str) or not master_name:
        raise ValueError(
            f"a sentinel:// URL needs the option master_name (the name Sentinel monitors), "
            f"got {master_name!r} for {redact(url)!r}; in Celery: redislock_transport_options = "
            "{'master_name': 'mymaster'} (or broker_transport_options when the broker URL "
            "is used); with the CLI: --master-name"
        )
    if sentinel_kwargs is not None and not isinstance(sentinel_kwargs, Mapping):
        raise TypeError(f"sentinel_kwargs must be a dict, got {sentinel_kwargs!r}")
    min_others = sentinel_opts.get("min_other_sentinels", 0)
    if isinstance(min_others, bool) or not isinstance(min_others, int) or min_others < 0:
        raise TypeError(f"min_other_sentinels must be an int >= 0, got {min_others!r}")
    hosts: list[tuple[str, int]] = []
    for item in url.split(";"):
        item = item.strip()
        if not item:
            continue
        if not item.lower().startswith("sentinel://"):
            raise ValueError(
                f"every part of a Sentinel URL must be sentinel://, got {redact(item)!r}"
            )
        parts = urlsplit(item)
        db = _db_of(parts.path, url)
        if db is not None:
            kwargs.setdefault("db", db)
        if parts.password:
            kwargs.setdefault("password", unquote(parts.password))
        if parts.username:
            kwargs.setdefault("username", unquote(parts.username))
        hosts.append(_host_port(parts.netloc.rpartition("@")[2], url, 26379))
    if not hosts:
        raise ValueError(f"no Sentinel host in {redact(url)!r}")
    own_opts: dict[str, Any] = {
        "socket_timeout": kwargs["socket_timeout"],
        "socket_connect_timeout": kwargs["socket_connect_timeout"],
    }
    own_opts.update(sentinel_kwargs or {})
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        hosts, min_other_sentinels=min_others, sentinel_kwargs=own_opts, **kwargs
    )
    return sentinel.master_for(master_name)  # type: ignore[no-untyped-call]
