"""Every Redis URL form the Celery broker (kombu) accepts, against real servers.

Each form builds a client with :func:`client_from_url` (directly, or through
the Celery settings the way a worker does), takes a real lock through it,
and the test checks on the server itself (a plain client on its port) that
the lock's key landed in the database the URL names.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from celery_redislock import RedisLock
from celery_redislock.core.connection import client_from_url
from celery_redislock.settings import settings_from_app
from celery_redislock.testing.servers import RedisServer
from devtools.engines import SentinelGroup
from tests.core.test_tls_acl import tls_server  # noqa: F401  (a module-scoped fixture)


class _Conf(dict[str, Any]):
    pass


class _App:
    def __init__(self, **conf: Any) -> None:
        self.conf = _Conf(conf)


def holds_lock_in_db(client: Any, direct: Callable[[int], Any], db: int, prefix: str) -> None:
    """Take a lock through ``client``; it must be in database ``db`` of the server
    (``direct(n)``: a plain client on database ``n`` of that server), and only there."""
    lock = RedisLock(client, "url-form", prefix=prefix)
    assert lock.acquire(blocking=False)
    try:
        for n in {db, 0}:
            with direct(n) as plain:
                assert plain.exists(lock.keys.holders) == (1 if n == db else 0), n
    finally:
        lock.release()


def on_port(port: int) -> Callable[[int], redis.Redis]:
    return lambda db: redis.Redis(port=port, db=db, socket_timeout=10)


@pytest.fixture(scope="module")
def unix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, Path]]:
    sock = tmp_path_factory.mktemp("sock") / "redis.sock"
    with RedisServer(extra_args=["--unixsocket", str(sock), "--unixsocketperm", "700"]) as server:
        yield server, sock


@pytest.mark.parametrize(
    ("form", "db"),
    [
        ("redis+socket://{sock}?db=2&socket_timeout=2", 2),  # the example
        ("redis+socket://{sock}?virtual_host=3", 3),  # as Celery's docs spell the database
        ("socket://{sock}?db=4", 4),  # the result backend's form
        ("unix://{sock}?db=5", 5),
        ("redis+socket://{sock}", 0),
    ],
)
def test_unix_socket_forms(
    unix_server: tuple[RedisServer, Path], form: str, db: int, prefix: str
) -> None:
    server, sock = unix_server
    url = form.format(sock=sock)
    client = client_from_url(url)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["path"] == str(sock)
    if "socket_timeout=2" in url:
        assert kwargs["socket_timeout"] == 2.0  # a float, as redis-py's from_url makes it
    holds_lock_in_db(client, on_port(server.port), db, prefix)
    client.close()


def test_a_unix_socket_broker_is_the_default_lock_redis(
    unix_server: tuple[RedisServer, Path], prefix: str
) -> None:
    server, sock = unix_server
    settings = settings_from_app(_App(broker_url=f"redis+socket://{sock}?db=6&socket_timeout=3"))
    assert settings.url_setting == "broker_url"
    client = client_from_url(settings.url, settings.transport_options)
    holds_lock_in_db(client, on_port(server.port), 6, prefix)
    client.close()


def test_rediss_with_query_options(
    tls_server: tuple[int, dict[str, str]],  # noqa: F811
    prefix: str,
) -> None:
    port, certs = tls_server
    query = (
        f"ssl_cert_reqs=required&ssl_ca_certs={certs['ca.crt']}"
        f"&ssl_certfile={certs['client.crt']}&ssl_keyfile={certs['client.key']}"
        "&ssl_check_hostname=false&socket_timeout=4"
    )
    client = client_from_url(f"rediss://127.0.0.1:{port}/1?{query}")
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["ssl_check_hostname"] is False and kwargs["socket_timeout"] == 4.0

    def tls_direct(db: int) -> Any:
        return client_from_url(f"rediss://127.0.0.1:{port}/{db}?{query}")

    holds_lock_in_db(client, tls_direct, 1, prefix)
    # kombu's rule: TLS settings on a redis:// URL (query or broker_use_ssl) mean TLS.
    broker = settings_from_app(
        _App(
            broker_url=f"redis://127.0.0.1:{port}/2",
            broker_use_ssl={
                "ssl_cert_reqs": ssl.CERT_REQUIRED,
                "ssl_ca_certs": certs["ca.crt"],
                "ssl_certfile": certs["client.crt"],
                "ssl_keyfile": certs["client.key"],
            },
        )
    )
    upgraded = [
        client_from_url(f"redis://127.0.0.1:{port}/2?{query}"),
        client_from_url(broker.url, broker.transport_options),
    ]
    for each in upgraded:
        holds_lock_in_db(each, tls_direct, 2, prefix)
        each.close()
    # The query's CERT_NONE wins over the options' (as in redis-py and kombu).
    lax = client_from_url(
        f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=CERT_NONE&ssl_certfile={certs['client.crt']}"
        f"&ssl_keyfile={certs['client.key']}",
        {"ssl_cert_reqs": "required"},
    )
    assert lax.ping()
    for each in (client, lax):
        each.close()


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelGroup]:
    with SentinelGroup() as group:
        yield group


def test_sentinel_lists_with_transport_options(sentinels: SentinelGroup, prefix: str) -> None:
    hosts = [f"sentinel://127.0.0.1:{s.port}" for s in sentinels.sentinels]
    url = ";".join(hosts) + "/3?socket_timeout=4"
    direct = on_port(sentinels.master_port())
    client = client_from_url(url, {"master_name": sentinels.master_name})
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 4.0
    holds_lock_in_db(client, direct, 3, prefix)
    client.close()
    # The broker's URL and broker_transport_options, as a worker reads them.
    broker = settings_from_app(
        _App(
            broker_url=";".join(hosts) + "/4",
            broker_transport_options={
                "master_name": sentinels.master_name,
                "min_other_sentinels": 1,
                "visibility_timeout": 3600,
            },
        )
    )
    client = client_from_url(broker.url, broker.transport_options)
    holds_lock_in_db(client, direct, 4, prefix)
    client.close()
    # A sentinel:// redislock_url of its own finds master_name in the broker's options.
    own = settings_from_app(
        _App(
            broker_url="redis://127.0.0.1:1/0",
            broker_transport_options={"master_name": sentinels.master_name},
            redislock_url=";".join(hosts[1:]) + "/5",
        )
    )
    client = client_from_url(own.url, own.transport_options)
    holds_lock_in_db(client, direct, 5, prefix)
    client.close()


@pytest.mark.parametrize(
    ("url", "db"),
    [
        ("redis://127.0.0.1:{port}/0?db=2", 2),  # docs/urls-and-cli.md's example
        ("redis://127.0.0.1:{port}/3", 3),
        ("redis://127.0.0.1:{port}?db=4", 4),
    ],
)
def test_a_db_in_the_query_wins_over_the_path_as_in_redis_py(
    own_redis: RedisServer, url: str, db: int, prefix: str
) -> None:
    """Query options are read as redis-py's ``from_url`` reads them: a
    ``db`` in the query selects the database even with a ``/0`` path."""
    given = url.format(port=own_redis.port)
    assert redis.Redis.from_url(given).connection_pool.connection_kwargs["db"] == db
    holds_lock_in_db(client_from_url(given), on_port(own_redis.port), db, prefix)
