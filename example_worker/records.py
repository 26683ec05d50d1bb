"""What the example's tasks and producer write down, so the report can be
computed from the task bodies' own records (not from what the producer hopes).

All keys live under the namespace ``<ns>:`` (``EXAMPLE_NAMESPACE``), so a
demo on a shared Redis neither sees nor leaves anything else::

    <ns>:runs        LIST  one JSON record per task body that ran
    <ns>:sent        HASH  "<task>|<lock name>" -> messages sent by the producer
    <ns>:sent_at     HASH  task id -> send time (epoch seconds)
    <ns>:done        HASH  task name -> executions finished (not counting requeues)
    <ns>:contended   HASH  "<lock name>|<policy>" -> lock_contended signals
    <ns>:acquired    LIST  JSON {name, token, waited} per lock_acquired signal
    <ns>:released    HASH  "<reason>|<held>" -> lock_released signals
    <ns>:lost        LIST  JSON per lock_lost signal
    <ns>:ready       SET   hostnames of the workers that are ready
    <ns>:cache:<id>  HASH  the example's cache entries (value, token, built_at)

Times are ``time.time()`` of the process that records: one host's clock for
the demo, the Docker host's clock for docker compose.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import redis

__all__ = ["Recorder", "namespace", "redis_url"]


def redis_url() -> str:
    return os.environ.get("REDIS_URL", "redis://localhost:6379/0")


def namespace() -> str:
    return os.environ.get("EXAMPLE_NAMESPACE", "example")


@dataclass
class Recorder:
    """Reads and writes the records of one namespace."""

    client: Any
    ns: str

    @classmethod
    def from_env(cls) -> Recorder:
        return cls(redis.Redis.from_url(redis_url(), socket_timeout=10), namespace())

    def key(self, name: str) -> str:
        return f"{self.ns}:{name}"

    # -- writing (tasks, signal handlers, producer) ----------------------------

    def run(self, **record: Any) -> None:
        self.client.rpush(self.key("runs"), json.dumps(record, sort_keys=True))

    def count(self, hash_name: str, field: str, amount: int = 1) -> None:
        self.client.hincrby(self.key(hash_name), field, amount)

    def append(self, list_name: str, **record: Any) -> None:
        self.client.rpush(self.key(list_name), json.dumps(record, sort_keys=True))

    def sent(self, entries: Mapping[str, float], counts: Mapping[str, int]) -> None:
        """Record sent task ids (with send times) and per-key message counts."""
        pipe = self.client.pipeline(transaction=False)
        if entries:
            pipe.hset(self.key("sent_at"), mapping=dict(entries))
        for field, amount in counts.items():
            pipe.hincrby(self.key("sent"), field, amount)
        pipe.execute()

    def ready(self, hostname: str) -> None:
        self.client.sadd(self.key("ready"), hostname)

    # -- reading (progress, report) ------------------------------------------------

    def ready_workers(self) -> set[str]:
        return {_text(h) for h in self.client.smembers(self.key("ready"))}

    def runs(self) -> list[dict[str, Any]]:
        return [json.loads(r) for r in self.client.lrange(self.key("runs"), 0, -1)]

    def listed(self, list_name: str) -> list[dict[str, Any]]:
        return [json.loads(r) for r in self.client.lrange(self.key(list_name), 0, -1)]

    def counts(self, hash_name: str) -> dict[str, int]:
        raw = self.client.hgetall(self.key(hash_name))
        return {_text(k): int(v) for k, v in raw.items()}

    def sent_at(self) -> dict[str, float]:
        raw = self.client.hgetall(self.key("sent_at"))
        return {_text(k): float(v) for k, v in raw.items()}

    def finished(self) -> int:
        return sum(self.counts("done").values())

    def keys(self) -> Iterator[str]:
        for raw in self.client.scan_iter(match=f"{self.ns}:*", count=1000):
            yield _text(raw)

    def clear(self, keep: tuple[str, ...] = (), locks: bool = True) -> None:
        """Delete every key of the namespace but ``keep`` (SCAN, never KEYS).

        ``locks=False`` spares the lock keys (``<ns>:{name}:...``, the lock
        prefix is the namespace), for clearing while workers may hold locks.
        """
        kept = {self.key(name) for name in keep}
        batch: list[str] = []
        for key in self.keys():
            if key in kept or (not locks and key.startswith(f"{self.ns}:{{")):
                continue
            batch.append(key)
            if len(batch) >= 500:
                self.client.delete(*batch)
                batch.clear()
        if batch:
            self.client.delete(*batch)

    def drop_queue(self) -> None:
        """Delete the Celery queue named after the namespace and its kombu binding
        (only once no worker consumes from it)."""
        self.client.delete(self.ns, f"_kombu.binding.{self.ns}")


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
