"""Part 4: Celery (placeholder until LockedTask/SemaphoreTask land)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CeleryParams:
    runs: int = 3
    tasks: int = 2000
    concurrency: int = 2


QUICK = CeleryParams(runs=1, tasks=300)


def run(url: str, params: CeleryParams, log: Any = print) -> dict[str, Any]:
    return {"params": params.__dict__, "missing": "LockedTask/SemaphoreTask not merged yet"}
