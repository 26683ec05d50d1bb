"""benchmarks/scale.py still runs (tiny parameters; the figures are not checked)."""

from __future__ import annotations

from benchmarks import scale


def test_scale_benchmark_runs_on_both_deployments() -> None:
    rows = scale.run(seconds=0.2, procs=1, leases=30)
    assert [row["deployment"] for row in rows] == ["single redis-server", "3-master cluster"]
    assert all(row["cycles_per_s"] > 0 and row["renewal_batch_ms"] > 0 for row in rows)
