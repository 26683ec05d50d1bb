"""docs/observability.md and the Grafana dashboard name the metrics that exist.

The metric names are read from what the code registers: a worker's
(``celery_redislock.worker.metrics.WorkerMetrics``) and the exporter's
(``celery_redislock.admin.gauges.RedisGauges``), so a renamed metric fails here.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client", reason="pip install 'celery-redislock[metrics]'")

ROOT = Path(__file__).resolve().parents[2]


def registered(client: Any, prefix: str) -> set[str]:
    from celery_redislock.admin.gauges import RedisGauges
    from celery_redislock.worker.metrics import WorkerMetrics

    worker = WorkerMetrics(tempfile.mkdtemp())
    metrics = [m for m in vars(worker).values() if hasattr(m, "_name")]
    names = {f"{m._name}_total" if m._type == "counter" else m._name for m in metrics}
    names |= {family.name for family in RedisGauges(client, prefix).collect()}
    return names


def test_every_metric_is_documented_and_the_dashboard_uses_only_real_ones(
    redis_client: Any, prefix: str
) -> None:
    names = registered(redis_client, prefix)
    assert {"redislock_acquired_total", "redislock_parked", "redislock_slots_in_use"} <= names
    doc = (ROOT / "docs" / "observability.md").read_text()
    assert {n for n in names if f"`{n}" not in doc} == set()
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {
        re.sub(r"_(bucket|count|sum)$", "", n)
        for e in exprs
        for n in re.findall(r"redislock_\w+", e)
    }
    assert used and used <= names, used - names
