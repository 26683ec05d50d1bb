"""The Redis-side gauges, for ``celery redislock exporter``: parked work and
overdue promotions, read at each scrape, once for the whole deployment.

======================================  ===========================================
``redislock_parked``                    tasks waiting in a park
``redislock_parked_oldest_age_seconds`` age of the oldest of them
``redislock_promotions_overdue``        promotions published whose message has not
                                        reached a worker by its deadline (the
                                        sweeper publishes them again)
``redislock_parked_keys``               keys with parked or promoted work
======================================  ===========================================

Labels ``task`` (the task name of each key's first parked task) and ``kind``
(its ``lock`` / ``semaphore`` / ``rate``, ``unknown`` when the exporter's app
does not know the task), never the key.

Guaranteed: the cost of a scrape is one read-only script call per key that
has parked or promoted work (the park's index), so it does not grow with
idle keys, and nothing is written.  Not here: how many slots are in use or
keys at their limit, which would need an index of held keys that every
acquisition pays for; ``celery redislock status --top`` shows them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .core.park import Parking, indexed_names

__all__ = ["ParkGauges"]


class ParkGauges:
    """A prometheus-client collector of the park's gauges (see the module docstring)."""

    def __init__(self, client: Any, prefix: str, tasks: dict[str, Any] | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.tasks = tasks or {}

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        parked: dict[tuple[str, str], float] = {}
        oldest: dict[tuple[str, str], float] = {}
        overdue: dict[tuple[str, str], float] = {}
        keys: dict[tuple[str, str], float] = {}
        for name in indexed_names(self.client, self.prefix):
            status = Parking(self.client, self.prefix, name).status(count=1)
            first = (status.entries or status.promoted or [{}])[0]
            labels = self._labels(first.get("task"))
            parked[labels] = parked.get(labels, 0) + status.parked
            overdue[labels] = overdue.get(labels, 0) + status.overdue
            keys[labels] = keys.get(labels, 0) + 1
            if status.oldest_age is not None:
                oldest[labels] = max(oldest.get(labels, 0.0), status.oldest_age)
        for metric, doc, values in (
            ("redislock_parked", "tasks waiting in a park", parked),
            ("redislock_parked_oldest_age_seconds", "age of the oldest parked task", oldest),
            ("redislock_promotions_overdue", "promotions not arrived by their deadline", overdue),
            ("redislock_parked_keys", "keys with parked or promoted work", keys),
        ):
            family = GaugeMetricFamily(metric, doc, labels=["task", "kind"])
            for (task, kind), value in sorted(values.items()):
                family.add_metric([task, kind], value)
            yield family

    def _labels(self, task: Any) -> tuple[str, str]:
        name = str(task or "unknown")
        kind = getattr(self.tasks.get(name), "_redislock_kind", None) or "unknown"
        return name, str(kind)
