"""Where a redis-py client connects, as a URL for messages (password masked).

Used to name the Redis a ``redislock_client_factory`` client actually uses:
the URL the factory was given may not be where its client connects.  Read
from the client's connection pool (a plain or TLS server, a Unix socket, a
Sentinel-managed primary) or its cluster nodes; anything else is named by its
type.  Nothing is connected to.
"""

from __future__ import annotations

from typing import Any

__all__ = ["address_of"]


def address_of(client: Any) -> str:
    """A URL naming where ``client`` connects, e.g. ``redis://:***@host:6379/2``."""
    get_nodes = getattr(client, "get_nodes", None)
    if callable(get_nodes) and not hasattr(client, "connection_pool"):  # a RedisCluster
        nodes = ",".join(f"{node.host}:{node.port}" for node in get_nodes())
        return f"redis+cluster://{nodes}"
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return f"a {type(client).__module__}.{type(client).__qualname__} client"
    db = kwargs.get("db") or 0
    auth = _auth(kwargs)
    service = getattr(pool, "service_name", None)
    if service:  # redis-py's SentinelConnectionPool
        return f"sentinel://{auth}(primary {service!r})/{db}"
    path = kwargs.get("path")
    if path:
        return f"unix://{auth}{path}?db={db}"
    scheme = "rediss" if "ssl" in _connection_class_name(pool).lower() else "redis"
    return f"{scheme}://{auth}{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{db}"


def _connection_class_name(pool: Any) -> str:
    connection_class = getattr(pool, "connection_class", None)
    return getattr(connection_class, "__name__", "")


def _auth(kwargs: dict[str, Any]) -> str:
    user, password = kwargs.get("username"), kwargs.get("password")
    if password:
        return f"{user or ''}:***@"
    return f"{user}@" if user else ""
