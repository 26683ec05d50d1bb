"""client_from_url: every accepted form against a real server, and precise errors for bad input."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import redis

from celery_redislock import RedisLock
from celery_redislock.core.connection import client_from_url
from celery_redislock.settings import settings_from_app
from celery_redislock.testing.servers import RedisServer


def built_by_dotted_path(url: str, options: dict[str, Any]) -> redis.Redis:
    return redis.Redis.from_url(url, client_name=options.get("name", "factory"))


def not_a_client(url: str, options: dict[str, Any]) -> object:
    return object()


@pytest.mark.parametrize(
    ("url", "options", "error", "match"),
    [
        ("localhost:6379", {}, ValueError, "not a Redis URL"),
        ("amqp://guest@localhost//", {}, ValueError, "unsupported Redis URL scheme 'amqp'"),
        ("redis://h:6379/0", {"master_name": "m"}, ValueError, "are for sentinel:// URLs"),
        ("sentinel://h:26379", {}, ValueError, "needs the option master_name"),
        ("sentinel://h:26379;redis://h:1", {"master_name": "m"}, ValueError, "must be sentinel://"),
        ("sentinel://h:port", {"master_name": "m"}, ValueError, "bad host:port 'h:port'"),
        ("unix:///r.sock", {"ssl_ca_certs": "/ca.pem"}, ValueError, "TLS options ssl_ca_certs"),
        ("socket:///r.sock?ssl_cert_reqs=none", {}, ValueError, "TLS options ssl_cert_reqs"),
        ("redis+socket://", {}, ValueError, "no socket path"),
        ("unix:///r.sock", {"ssl": True}, ValueError, "ssl does not apply to a Unix socket"),
        ("redis://h:notaport/0", {}, ValueError, r"bad port in 'redis://h:notaport/0'"),
        ("redis://:pw@h:99999/0", {}, ValueError, r"bad port in 'redis://:\*\*\*@h:99999/0'"),
        ("redis://h/x", {}, ValueError, "bad database '/x'"),
        ("redis://h/0?virtual_host=2", {}, ValueError, "virtual_host is for Unix socket"),
        ("redis://h/0?socket_timeout=soon", {}, ValueError, "bad value 'soon' for socket_timeout"),
        ("redis://h/0?visibility_timeout=1", {}, ValueError, "unknown .* visibility_timeout"),
        (
            "sentinel://h:1/0",
            {"master_name": "m", "min_other_sentinels": "x"},
            TypeError,
            "min_other_sentinels",
        ),
        ("rediss://h", {"ssl_cert_reqs": "maybe"}, ValueError, "ssl_cert_reqs must be required"),
        ("redis+cluster://h:7000/2", {}, ValueError, "only database 0"),
        ("unix:///tmp/r.sock", {"cluster": True}, ValueError, "cluster=True needs a redis://"),
        ("redis://h", {"cluster": "yes"}, TypeError, "cluster must be True or False"),
        ("redis://h", {"visibility_timeout": 3600}, ValueError, "unknown .* visibility_timeout"),
        ("redis://h", {"client_factory": 42}, TypeError, "client_factory must be a callable"),
        ("redis://h", {"client_factory": "no.such.module:f"}, ValueError, "cannot import"),
        ("redis://h", {"client_factory": "tests.scale.test_connection:nope"}, ValueError, "has no"),
        (
            "redis://h",
            {"client_factory": "tests.scale.test_connection:not_a_client"},
            TypeError,
            "not a redis-py client",
        ),
    ],
)
def test_bad_urls_and_options_are_rejected_precisely(
    url: str, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        client_from_url(url, options)


def test_passwords_do_not_appear_in_errors() -> None:
    with pytest.raises(ValueError) as info:
        client_from_url("sentinel://:s3cret@h:26379")
    assert "s3cret" not in str(info.value)


def test_cert_reqs_spellings_are_normalised() -> None:
    for spelling, expected in [
        ("CERT_REQUIRED", ssl.CERT_REQUIRED),
        ("none", ssl.CERT_NONE),
        (ssl.CERT_OPTIONAL, ssl.CERT_OPTIONAL),
    ]:
        client = client_from_url("rediss://127.0.0.1:1/0", {"ssl_cert_reqs": spelling})
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["ssl_cert_reqs"] in (expected, expected.name, _short(expected))
    from_query = client_from_url("rediss://127.0.0.1:1/0?ssl_cert_reqs=CERT_NONE")
    assert from_query.connection_pool.connection_kwargs["ssl_cert_reqs"] == "none"


def _short(mode: ssl.VerifyMode) -> str:
    return {ssl.CERT_NONE: "none", ssl.CERT_OPTIONAL: "optional"}.get(mode, "required")


def test_redis_and_unix_urls_and_factories_reach_the_server(tmp_path: Path, prefix: str) -> None:
    sock = tmp_path / "redis.sock"
    with RedisServer(extra_args=["--unixsocket", str(sock), "--unixsocketperm", "700"]) as server:
        clients = [
            client_from_url(server.url),
            client_from_url(f"unix://{sock}?db=0"),
            client_from_url(server.url, {"client_factory": lambda u, o: redis.Redis.from_url(u)}),
            client_from_url(
                server.url,
                {"client_factory": "tests.scale.test_connection:built_by_dotted_path", "name": "x"},
            ),
        ]
        for i, client in enumerate(clients):
            lock = RedisLock(client, "shared", prefix=prefix)
            assert lock.acquire(blocking=False), f"client {i}"
            assert all(
                not RedisLock(other, "shared", prefix=prefix).acquire(blocking=False)
                for other in clients
            )
            lock.release()
        assert clients[3].client_getname() in ("x", b"x")
        for client in clients:
            client.close()


class _Conf(dict[str, Any]):
    pass


class _App:
    def __init__(self, **conf: Any) -> None:
        self.conf = _Conf(conf)


def test_celery_setting_redislock_client_factory() -> None:
    settings = settings_from_app(
        _App(
            redislock_url="redis://127.0.0.1:1/0",
            redislock_client_factory="tests.scale.test_connection:built_by_dotted_path",
        )
    )
    assert settings.transport_options["client_factory"] == (
        "tests.scale.test_connection:built_by_dotted_path"
    )
    client = client_from_url(settings.url, settings.transport_options)
    assert isinstance(client, redis.Redis)


def test_a_reused_sentinel_or_tls_broker_brings_its_connection_options() -> None:
    sentinel = settings_from_app(
        _App(
            broker_url="sentinel://127.0.0.1:26379;sentinel://127.0.0.1:26380/0",
            broker_transport_options={"master_name": "mymaster", "visibility_timeout": 3600},
        )
    )
    assert sentinel.transport_options == {"master_name": "mymaster"}
    tls = settings_from_app(
        _App(
            broker_url="rediss://127.0.0.1:6380/0",
            broker_use_ssl={"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/ca.pem"},
            redislock_transport_options={"ssl_ca_certs": "/mine.pem"},
        )
    )
    assert tls.transport_options == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": "/mine.pem",
    }
    # A separate redislock_url does not inherit the broker's options.
    own = settings_from_app(
        _App(
            broker_url="sentinel://127.0.0.1:26379",
            broker_transport_options={"master_name": "mymaster"},
            redislock_url="redis://127.0.0.1:6379/0",
        )
    )
    assert own.transport_options == {}
