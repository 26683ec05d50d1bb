"""TLS (rediss://, certificates made here with openssl) and a restricted ACL user."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
import redis
from redis.exceptions import NoPermissionError

from celery_redislock import FairSemaphore, NotReplicated, RedisLock
from celery_redislock.core.acl import CLIENT_COMMANDS, SCRIPT_COMMANDS, acl_rules
from celery_redislock.core.connection import client_from_url
from celery_redislock.testing.servers import RedisServer, free_port, server_version
from tests.waiting import wait_for


def openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        pytest.fail(
            "the openssl command is needed to make test certificates (apt-get install openssl)"
        )
    subprocess.run([binary, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca = ["-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1"]
    subject = ["-subj", "/CN=redislock-test-ca"]
    openssl(
        "req",
        "-x509",
        *ec,
        "-days",
        "1",
        *subject,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        cwd=directory,
    )
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, ext in (("server", ["-extfile", "san.ext"]), ("client", [])):
        csr = ["-keyout", f"{name}.key", "-out", f"{name}.csr"]
        openssl("req", *ec, "-subj", f"/CN={name}", *csr, cwd=directory)
        openssl(
            "x509", "-req", "-in", f"{name}.csr", *ca, "-out", f"{name}.crt", *ext, cwd=directory
        )
    names = ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")
    return {name: str(directory / name) for name in names}


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, dict[str, str]]]:
    certs = make_certificates(tmp_path_factory.mktemp("certs"))
    tls_port = free_port()
    server = RedisServer(
        extra_args=[
            "--tls-port",
            str(tls_port),
            "--tls-cert-file",
            certs["server.crt"],
            "--tls-key-file",
            certs["server.key"],
            "--tls-ca-cert-file",
            certs["ca.crt"],
        ]
    )
    try:
        server.start()
    except RuntimeError as exc:
        # Only a server built without TLS is a reason to skip; any other start failure fails.
        # Redis: "'tls-port ...' Bad directive"; Valkey: "Failed finding TLS support".
        said = str(exc)
        if ("'tls-port" in said and "Bad directive" in said) or "Failed finding TLS" in said:
            pytest.skip(
                f"TLS: {server.binary} ({server_version(server.binary)}) was built without TLS; "
                "to run the TLS tests, put a TLS-capable redis-server on PATH "
                "(Debian: apt-get install redis-server) or name one in REDISLOCK_SERVER"
            )
        raise
    try:
        yield tls_port, certs
    finally:
        server.stop()


def test_rediss_with_client_certificates(
    tls_server: tuple[int, dict[str, str]], prefix: str
) -> None:
    port, certs = tls_server
    options = {
        "ssl_cert_reqs": "CERT_REQUIRED",
        "ssl_ca_certs": certs["ca.crt"],
        "ssl_certfile": certs["client.crt"],
        "ssl_keyfile": certs["client.key"],
    }
    client = client_from_url(f"rediss://127.0.0.1:{port}/0", options)
    assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    holder = RedisLock(client, "tls", prefix=prefix, ttl=0.6)
    assert holder.acquire()
    waiter = RedisLock(client, "tls", prefix=prefix)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=30)))
    thread.start()
    wait_for(lambda: holder.waiters(), 10, message="the waiter to queue")
    holder.release()
    thread.join(30)
    assert got == [True]
    waiter.release()
    client.close()


def test_rediss_verifies_the_server_certificate(tls_server: tuple[int, dict[str, str]]) -> None:
    port, certs = tls_server
    # The CA given in the query string: accepted.
    query = f"ssl_cert_reqs=required&ssl_ca_certs={certs['ca.crt']}"
    good = client_from_url(
        f"rediss://127.0.0.1:{port}/0?{query}",
        {"ssl_certfile": certs["client.crt"], "ssl_keyfile": certs["client.key"]},
    )
    assert good.ping()
    # Without our CA the server's certificate cannot be verified: refused.
    bad = client_from_url(
        f"rediss://127.0.0.1:{port}/0",
        {"ssl_certfile": certs["client.crt"], "ssl_keyfile": certs["client.key"]},
    )
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        bad.ping()


# -- ACL ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def user(server: RedisServer, name: str, rules: list[str]) -> redis.Redis:
    admin = redis.Redis(port=server.port)
    admin.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", *rules)
    return redis.Redis(port=server.port, username=name, password="pw", socket_timeout=10)


def test_documented_commands_are_exactly_what_the_scripts_call() -> None:
    called: set[str] = set()
    scripts = resources.files("celery_redislock.core").joinpath("lua")
    for lua in [*scripts.iterdir(), *scripts.joinpath("includes").iterdir()]:
        if lua.name.endswith(".lua"):
            called |= {c.lower() for c in re.findall(r"redis\.p?call\('(\w+)'", lua.read_text())}
    assert called == set(SCRIPT_COMMANDS)
    assert {"evalsha", "script|load", "blpop"} <= set(CLIENT_COMMANDS)


def test_a_user_with_exactly_the_documented_rules_can_do_everything(
    acl_server: RedisServer, prefix: str
) -> None:
    client = user(acl_server, "locks", acl_rules(prefix))
    redis.Redis(port=acl_server.port).script_flush()  # so SCRIPT LOAD is exercised
    holder = RedisLock(client, "job", prefix=prefix, ttl=0.6)
    assert holder.acquire()
    waiter = RedisLock(client, "job", prefix=prefix)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=30)))
    thread.start()
    wait_for(lambda: holder.waiters(), 10, message="the waiter to queue")
    # renewed by the heartbeat past its ttl, with this user
    first_valid = holder.lease.valid_until if holder.lease else 0.0
    wait_for(
        lambda: holder.lease is not None and holder.lease.valid_until > first_valid + 0.3,
        10,
        message="a heartbeat renewal",
    )
    assert holder.holders()[0].token == holder.token
    holder.release()
    thread.join(30)
    assert got == [True]
    waiter.release()
    sem = FairSemaphore(client, "pool", 2, prefix=prefix)
    with sem:
        assert sem.refresh()
    with pytest.raises(NotReplicated, match="only 0 of the 1"):  # WAIT is allowed
        RedisLock(client, "acked", prefix=prefix, replicas=1, replica_timeout=0.05).acquire()


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        ("+blpop", r"no permissions to run the 'blpop' command"),
        ("+zadd", r"may not run ZADD, which acquire\.lua calls.*grant \+zadd"),
        ("+time", r"may not run TIME, which acquire\.lua calls"),
        ("+evalsha", r"no permissions to run the 'evalsha' command"),
    ],
)
def test_a_missing_command_is_named(
    acl_server: RedisServer, prefix: str, missing: str, expected: str
) -> None:
    rules = [rule for rule in acl_rules(prefix) if rule != missing]
    client = user(acl_server, f"no{missing[1:].replace('|', '-')}", rules)
    other = RedisLock(redis.Redis(port=acl_server.port), "busy", prefix=prefix)
    assert other.acquire()  # so a blocking acquire has to wait (BLPOP)
    lock = RedisLock(client, "busy", prefix=prefix)
    with pytest.raises(NoPermissionError, match=expected):
        lock.acquire(timeout=5)
    assert lock.lease is None
    assert other.waiters() == []  # the queue place was given up
    other.release()


def test_without_publish_a_park_call_still_completes_and_the_worker_check_names_it(
    acl_server: RedisServer, prefix: str
) -> None:
    """The sweepers' wake-up is best effort: a user denied PUBLISH must not
    see a park call raise after its writes (the call would be parked, and run
    later, though the caller was told it failed).  The worker's start check
    names the missing permission instead."""
    from celery import Celery

    from celery_redislock.core.capacity import Capacity
    from celery_redislock.core.override import Overrides
    from celery_redislock.core.park import Parking, wake
    from celery_redislock.core.park_types import ParkConfig
    from celery_redislock.worker.checks import check_app

    client = user(acl_server, "nopublish", [r for r in acl_rules(prefix) if r != "+publish"])
    with pytest.raises(NoPermissionError):
        client.publish(f"{prefix}:x", 0)
    park = Parking(client, prefix, "nopub")
    first = park.enqueue("t1", Capacity.semaphore(1), '{"task": "x"}', 0, ParkConfig(), "x")
    second = park.enqueue("t2", Capacity.semaphore(1), '{"task": "x"}', 0, ParkConfig(), "x")
    assert first.token > 0 and second.count == 1  # reserved, then parked: no error
    assert wake(client, prefix, "nopub")  # `resume`: the name looked at again
    assert Overrides(client, "nopub", prefix=prefix).set(limit=2)  # `limit set`
    app = Celery("nopub", set_as_current=False)
    app.conf.redislock_url = f"redis://nopublish:pw@127.0.0.1:{acl_server.port}/0"
    app.conf.redislock_prefix = prefix
    [problem] = check_app(app)
    assert "refused a PUBLISH" in problem and "grant +publish" in problem, problem
    user(acl_server, "everything", acl_rules(prefix))
    app.conf.redislock_url = f"redis://everything:pw@127.0.0.1:{acl_server.port}/0"
    assert check_app(app) == []


def test_a_key_outside_the_pattern_is_named(acl_server: RedisServer, prefix: str) -> None:
    client = user(acl_server, "elsewhere", acl_rules("other"))
    with pytest.raises(NoPermissionError, match=rf"key pattern must allow ~{prefix}:\*"):
        RedisLock(client, "job", prefix=prefix).acquire(blocking=False)
