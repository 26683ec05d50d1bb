"""The demo's scenario: its sizes, and the accounts it uses."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["DEMO", "HEAVY", "REPORT_ACCOUNT", "SMALL", "Scenario", "light_account"]


@dataclass(frozen=True)
class Scenario:
    """Sizes and durations of one run (``DEMO``: about 15 s of tasks; ``SMALL``: the tests)."""

    users: int = 3
    requests_per_user: int = 100
    query_seconds: float = 2.0
    heavy_jobs: int = 60
    light_accounts: int = 4
    light_jobs: int = 5
    job_seconds: float = 0.6
    reports: int = 3
    report_seconds: float = 0.5

    @property
    def total(self) -> int:
        return (
            self.users * self.requests_per_user
            + self.heavy_jobs
            + self.light_accounts * self.light_jobs
            + self.reports
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


DEMO = Scenario()
SMALL = Scenario(
    users=2,
    requests_per_user=30,
    query_seconds=1.5,
    heavy_jobs=24,
    light_accounts=2,
    light_jobs=4,
    job_seconds=0.3,
    reports=3,
    report_seconds=0.3,
)

HEAVY = "acme"
REPORT_ACCOUNT = "acme"


def light_account(i: int) -> str:
    return f"light-{i + 1}"
