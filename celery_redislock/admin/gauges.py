"""The Redis-side gauges, for ``celery redislock exporter``: slots in use, keys
at their limit, parked work and overdue promotions, read at each scrape, once
for the whole deployment.

======================================  ===========================================
``redislock_slots_in_use``              slots taken: running holders and slots
                                        reserved for promoted tasks on their way
``redislock_keys_at_limit``             keys whose slots in use reach their limit
``redislock_parked``                    tasks waiting in a park
``redislock_parked_oldest_age_seconds`` age of the oldest of them
``redislock_promotions_overdue``        promotions published whose message has not
                                        reached a worker by its deadline (the
                                        sweeper publishes them again)
``redislock_parked_keys``               keys with parked or promoted work
``redislock_parked_keys_waiting_for``   keys whose parked work is held for a listed
                                        limit (``limits=``), label ``limit`` too
======================================  ===========================================

Labels ``task`` (the task name of a key's first holder, else of its first
parked task) and ``kind`` (its ``lock`` / ``semaphore`` / ``rate``, as the
exporter's app declares it, else as the key's entries show it, else
``unknown``), never the key.  ``limit``: the listed limit as the task
declares it (``Limit("stripe", 20)``: ``stripe``; ``Limit("region:{region}",
50)``: ``region:{region}``, never the region; a callable key: its name;
``unknown`` when the exporter's app does not know the task or the name fits
several of its limits), so its values are bounded by the code, not by the
data.  A key's limit is the one it runs by now
(:mod:`.keyrows`: a run-time override's included); a rate key has no limit, so
it is never at it.

Guaranteed: a scrape reads the names of two indexes, never the keyspace: the
park's (keys with parked or promoted work) and the index of held names
(:func:`~celery_redislock.core.keys.held_index`: every grant and renewal of a
task's lease lists its key until that lease's expiry, the release that leaves
it without holders takes it out).  Then one read-only
script call per park and one pipelined read per held key, so its cost grows
with the keys in use, not with idle keys; nothing is written (the scripts
that grant and release keep the index).  Not guaranteed: the slot gauges on a Redis Cluster (the
index would live in another slot than the keys, so it is not kept there and
those two gauges are not served), or a lock or semaphore taken outside a task
(a bare ``RedisLock`` is not indexed unless built with ``index=True``).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from typing import Any

from ..core.heartbeat import is_cluster
from ..core.inspection import LeaseSetState, inspect_names
from ..core.keys import LeaseKeys, held_index
from ..core.park import Parking, ParkStatus, indexed_names
from ..core.scripts import text
from .keyrows import key_row

__all__ = ["RedisGauges"]

Labels = tuple[str, str]


class RedisGauges:
    """A prometheus-client collector of the Redis-side gauges (see the module docstring)."""

    def __init__(self, client: Any, prefix: str, tasks: dict[str, Any] | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.tasks = tasks or {}

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        parks = [
            Parking(self.client, self.prefix, n).status(count=1)
            for n in indexed_names(self.client, self.prefix)
        ]
        families = [*self._park_values(parks)]
        if not is_cluster(self.client):
            families = [*self._slot_values({p.name: p for p in parks}), *families]
        for metric, doc, values in families:
            family = GaugeMetricFamily(metric, doc, labels=["task", "kind"])
            for (task, kind), value in sorted(values.items()):
                family.add_metric([task, kind], value)
            yield family
        waiting = GaugeMetricFamily(
            "redislock_parked_keys_waiting_for",
            "keys whose parked work is held for a listed limit",
            labels=["task", "kind", "limit"],
        )
        for labels, value in sorted(self._waiting_values(parks).items()):
            waiting.add_metric(list(labels), value)
        yield waiting

    def _waiting_values(self, parks: list[ParkStatus]) -> dict[tuple[str, str, str], float]:
        values: dict[tuple[str, str, str], float] = {}
        for status in parks:
            if not status.waits_for:
                continue
            task = (status.entries or status.promoted or [{}])[0].get("task")
            labels = (*self._labels(task, None), self._declared_limit(task, status.waits_for))
            values[labels] = values.get(labels, 0) + 1
        return values

    def _declared_limit(self, task: Any, name: str) -> str:
        """The listed limit of ``task`` that ``name`` was built from, as
        declared: the one template it matches, else the one callable key,
        else ``unknown``."""
        listed = getattr(type(self.tasks.get(str(task))), "_redislock_listed", ())
        keys = [limit.spec.key for limit in listed]
        templates = [key for key in keys if isinstance(key, str) and _matches(key, name)]
        if len(templates) == 1:
            return templates[0]
        callables = [key for key in keys if not isinstance(key, str)]
        if not templates and len(callables) == 1:
            return str(getattr(callables[0], "__name__", "callable"))
        return "unknown"

    def _park_values(self, parks: list[ParkStatus]) -> list[tuple[str, str, dict[Labels, float]]]:
        parked: dict[Labels, float] = {}
        oldest: dict[Labels, float] = {}
        overdue: dict[Labels, float] = {}
        keys: dict[Labels, float] = {}
        for status in parks:
            first = (status.entries or status.promoted or [{}])[0]
            labels = self._labels(first.get("task"), None)
            parked[labels] = parked.get(labels, 0) + status.parked
            overdue[labels] = overdue.get(labels, 0) + status.overdue
            keys[labels] = keys.get(labels, 0) + 1
            if status.oldest_age is not None:
                oldest[labels] = max(oldest.get(labels, 0.0), status.oldest_age)
        return [
            ("redislock_parked", "tasks waiting in a park", parked),
            ("redislock_parked_oldest_age_seconds", "age of the oldest parked task", oldest),
            ("redislock_promotions_overdue", "promotions not arrived by their deadline", overdue),
            ("redislock_parked_keys", "keys with parked or promoted work", keys),
        ]

    def _slot_values(
        self, parks: dict[str, ParkStatus]
    ) -> list[tuple[str, str, dict[Labels, float]]]:
        in_use: dict[Labels, float] = {}
        at_limit: dict[Labels, float] = {}
        names = sorted({*self._held_names(), *parks})
        overrides = self._override_limits(names)
        for state in inspect_names(self.client, self.prefix, names):
            park = parks.get(state.name)
            row = key_row(state.name, state, park, overrides.get(state.name))
            used = row.held + row.reserved
            if not used:
                continue
            labels = self._labels(self._task_of(state, park), row.kind)
            in_use[labels] = in_use.get(labels, 0) + used
            at_limit[labels] = at_limit.get(labels, 0) + int(
                bool(row.limit) and used >= (row.limit or 0)
            )
        return [
            ("redislock_slots_in_use", "slots held or reserved", in_use),
            ("redislock_keys_at_limit", "keys whose slots in use reach their limit", at_limit),
        ]

    def _held_names(self) -> list[str]:
        """The names the held index lists with a lease that may be live (by Redis time)."""
        seconds, micros = self.client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        listed = self.client.zrangebyscore(held_index(self.prefix), f"({now_ms}", "+inf")
        return [text(n) for n in listed]

    def _override_limits(self, names: list[str]) -> dict[str, int]:
        """The run-time limit override of each name that has one (one pipeline)."""
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hget(LeaseKeys(self.prefix, name).override, "limit")
        return {n: int(v) for n, v in zip(names, pipe.execute(), strict=True) if v}

    @staticmethod
    def _task_of(state: LeaseSetState, park: ParkStatus | None) -> Any:
        for holder in state.holders:
            if isinstance(holder.meta.get("task"), str):
                return holder.meta["task"]
        first = (park.entries or park.promoted or [{}])[0] if park else {}
        return first.get("task")

    def _labels(self, task: Any, kind: str | None) -> Labels:
        name = str(task or "unknown")
        declared = getattr(self.tasks.get(name), "_redislock_kind", None)
        if not declared and kind in ("lock", "semaphore", "rate"):
            declared = kind
        return name, str(declared or "unknown")


def _matches(template: str, name: str) -> bool:
    """Whether ``template`` (``"region:{region}"``) can build ``name``."""
    pattern = "".join(
        re.escape(literal) + ("" if field is None else ".*?")
        for literal, field, _, _ in string.Formatter().parse(template)
    )
    return re.fullmatch(pattern, name, flags=re.DOTALL) is not None
