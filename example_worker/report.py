"""The report of a run, computed from what the task bodies recorded.

Expectations checked (each violation is listed and makes the demo exit 1):

* every task sent was accounted for: run, skipped, or found fresh;
* ``refresh_cache``: exactly one rebuild per user, however many requests;
* ``sync_account``: every job ran exactly once, never more than
  ``ACCOUNT_LIMIT`` at once per account (intervals measured inside the task
  bodies, so inside the slot), and the heavy account did not starve the
  light ones: each light account finished its jobs before the heavy one did
  and waited less at worst;
* ``generate_report``: runs never overlapped and their fencing tokens rise in
  the order they ran;
* no lease was lost while its task ran.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .app import ACCOUNT_LIMIT
from .records import Recorder
from .scenario import HEAVY, REPORT_ACCOUNT, Scenario, light_account

__all__ = ["Report", "build_report", "max_overlap", "write_timeline"]

HAND_OFF_WAIT = 0.05  # an acquisition that waited longer was queued and handed the lock


@dataclass
class Report:
    scenario: Scenario
    drained: bool
    users: dict[int, dict[str, int]] = field(default_factory=dict)
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)
    reports: dict[str, Any] = field(default_factory=dict)
    locks: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    origin: float = 0.0
    runs: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.as_dict(),
            "drained": self.drained,
            "users": {str(k): v for k, v in self.users.items()},
            "accounts": self.accounts,
            "reports": self.reports,
            "locks": self.locks,
            "violations": self.violations,
        }

    def text(self) -> str:
        s = self.scenario
        lines = ["", "== cache stampede: refresh_cache, LockedTask, policy skip =="]
        lines.append("  user  requests  rebuilds  skipped  found-fresh")
        for user, u in sorted(self.users.items()):
            lines.append(
                f"  {user:>4}  {u['sent']:>8}  {u['rebuilt']:>8}  {u['skipped']:>7}  "
                f"{u['fresh']:>11}"
            )
        lines.append(
            f"  expected: 1 rebuild per user ({s.query_seconds:g} s slow query), every request "
            "accounted for"
        )
        lines += ["", f"== skewed backlog: sync_account, SemaphoreTask limit {ACCOUNT_LIMIT} =="]
        lines.append(
            "  account   jobs  ran  max-running  requeues  wait mean / p95 / max (s)  done at (s)"
        )
        for name, a in self.accounts.items():
            lines.append(
                f"  {name:<8} {a['sent']:>5} {a['ran']:>4} {a['max_running']:>12} "
                f"{a['requeues']:>9}  {a['wait_mean']:>6.2f} / {a['wait_p95']:>5.2f} / "
                f"{a['wait_max']:>5.2f}      {a['done_at']:>8.2f}"
            )
        lines.append(
            f"  expected: max-running <= {ACCOUNT_LIMIT}; light accounts done before "
            f"{HEAVY!r}, worst wait below {HEAVY!r}'s"
        )
        r = self.reports
        lines += ["", "== report queue: generate_report, LockedTask, policy wait =="]
        lines.append(
            f"  {r['ran']}/{r['sent']} ran one at a time (overlaps: {r['overlaps']}), "
            f"{r['handed_off']} handed the lock by the previous holder's release, fencing "
            f"tokens rising in run order: {'yes' if r['tokens_rising'] else 'NO'}"
        )
        k = self.locks
        lines += ["", "== locks =="]
        lines.append(
            f"  acquired {k['acquired']}, released {k['released']}, "
            f"lost while running: {k['lost']}; "
            f"duplicates skipped: {k['skipped']}, requeued (retry): {k['requeued']}"
        )
        lines.append("")
        if self.violations:
            lines.append("EXPECTATIONS VIOLATED:")
            lines += [f"  - {v}" for v in self.violations]
        else:
            lines.append("all expectations met")
        return "\n".join(lines)


def build_report(recorder: Recorder, scenario: Scenario, drained: bool) -> Report:
    runs = recorder.runs()
    sent = recorder.counts("sent")
    sent_at = recorder.sent_at()
    contended = recorder.counts("contended")
    acquired = recorder.listed("acquired")
    released = recorder.counts("released")
    lost = recorder.listed("lost")
    report = Report(scenario, drained, runs=runs)
    report.origin = min(sent_at.values(), default=0.0)
    if not drained:
        report.violations.append(
            f"not every task finished in time ({recorder.finished()} of {scenario.total})"
        )

    # -- refresh_cache
    by_user: dict[int, Counter[str]] = defaultdict(Counter)
    for run in runs:
        if run["task"] == "refresh_cache":
            by_user[int(run["user"])][run["outcome"]] += 1
    for user in range(1, scenario.users + 1):
        u = {
            "sent": sent.get(f"refresh_cache|cache:{user}", 0),
            "rebuilt": by_user[user]["rebuilt"],
            "fresh": by_user[user]["fresh"],
            "skipped": contended.get(f"cache:{user}|skip", 0),
        }
        report.users[user] = u
        if u["rebuilt"] != 1:
            report.violations.append(f"user {user}: {u['rebuilt']} rebuilds, expected 1")
        if u["rebuilt"] + u["fresh"] + u["skipped"] != u["sent"]:
            report.violations.append(
                f"user {user}: {u['sent']} requests but {u['rebuilt']} rebuilt + "
                f"{u['fresh']} fresh + {u['skipped']} skipped"
            )

    # -- sync_account
    names = [HEAVY] + [light_account(i) for i in range(scenario.light_accounts)]
    for name in names:
        mine = [r for r in runs if r["task"] == "sync_account" and r["account"] == name]
        waits = sorted(max(r["start"] - sent_at.get(r["task_id"], r["start"]), 0.0) for r in mine)
        jobs = Counter(r["job"] for r in mine)
        a: dict[str, Any] = {
            "sent": sent.get(f"sync_account|account:{name}", 0),
            "ran": len(mine),
            "ran_twice": sorted(j for j, n in jobs.items() if n > 1),
            "max_running": max_overlap((r["start"], r["end"]) for r in mine),
            "requeues": contended.get(f"account:{name}|retry", 0),
            "parked": contended.get(f"account:{name}|park", 0),
            "wait_mean": statistics.fmean(waits) if waits else 0.0,
            "wait_p95": waits[math.ceil(0.95 * len(waits)) - 1] if waits else 0.0,  # nearest rank
            "wait_max": waits[-1] if waits else 0.0,
            "done_at": max((r["end"] for r in mine), default=report.origin) - report.origin,
        }
        report.accounts[name] = a
        if a["ran"] != a["sent"] or a["ran_twice"]:
            report.violations.append(
                f"account {name}: {a['sent']} jobs sent, {a['ran']} ran"
                + (f", jobs run twice: {a['ran_twice']}" if a["ran_twice"] else "")
            )
        if a["max_running"] > ACCOUNT_LIMIT:
            report.violations.append(
                f"account {name}: {a['max_running']} ran at once, limit {ACCOUNT_LIMIT}"
            )
    heavy = report.accounts[HEAVY]
    for name in names[1:]:
        a = report.accounts[name]
        if a["done_at"] >= heavy["done_at"] or a["wait_max"] >= heavy["wait_max"]:
            report.violations.append(
                f"account {name} starved by {HEAVY!r}: done at {a['done_at']:.2f} s "
                f"(heavy {heavy['done_at']:.2f} s), worst wait {a['wait_max']:.2f} s "
                f"(heavy {heavy['wait_max']:.2f} s)"
            )

    # -- generate_report
    report_name = f"report:{REPORT_ACCOUNT}"
    ran = sorted((r for r in runs if r["task"] == "generate_report"), key=lambda r: r["start"])
    overlaps = sum(1 for a, b in itertools.pairwise(ran) if b["start"] < a["end"])
    tokens = [r["token"] for r in ran]
    waited = [a["waited"] for a in acquired if a["name"] == report_name]
    report.reports = {
        "sent": sent.get(f"generate_report|{report_name}", 0),
        "ran": len(ran),
        "overlaps": overlaps,
        "tokens_rising": all(a < b for a, b in itertools.pairwise(tokens)),
        "handed_off": sum(1 for w in waited if w > HAND_OFF_WAIT),
        "waited": [round(w, 3) for w in waited],
    }
    if report.reports["ran"] != report.reports["sent"]:
        report.violations.append(
            f"reports: {report.reports['sent']} sent, {report.reports['ran']} ran"
        )
    if overlaps:
        report.violations.append(f"reports: {overlaps} runs overlapped under one lock")
    if not report.reports["tokens_rising"]:
        report.violations.append(f"reports: fencing tokens not rising in run order: {tokens}")

    # -- the library's own signals
    report.locks = {
        "acquired": len(acquired),
        "released": sum(released.values()),
        "released_by_reason": released,
        "lost": len(lost),
        "skipped": sum(n for k, n in contended.items() if k.endswith("|skip")),
        "requeued": sum(n for k, n in contended.items() if k.endswith("|retry")),
    }
    if lost:
        report.violations.append(f"{len(lost)} lease(s) lost while running: {lost[:3]}")
    return report


def max_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """The largest number of ``(start, end)`` intervals open at one instant.

    An interval that ends exactly when another starts does not overlap it.
    """
    events = []
    for start, end in intervals:
        events += [(start, 1), (end, -1)]
    events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at equal times
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def write_json(report: Report, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    return path.resolve()


def write_timeline(report: Report, path: Path) -> Path:
    """Running tasks per account over time (PNG); returns the absolute path.

    Needs matplotlib (``pip install 'celery-redislock[demo]'``): raises
    ``ImportError`` saying so.
    """
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(
            "the timeline picture needs matplotlib: pip install 'celery-redislock[demo]'"
        ) from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    origin = report.origin
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(11, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    for name in report.accounts:
        spans = [
            (r["start"] - origin, r["end"] - origin)
            for r in report.runs
            if r["task"] == "sync_account" and r["account"] == name
        ]
        xs, ys = _step(spans)
        top.step(xs, ys, where="post", label=name, linewidth=2 if name == HEAVY else 1.2)
    top.axhline(ACCOUNT_LIMIT, color="red", linestyle="--", linewidth=1)
    top.annotate(
        f"semaphore_limit={ACCOUNT_LIMIT}",
        (0, ACCOUNT_LIMIT),
        color="red",
        xytext=(4, 4),
        textcoords="offset points",
    )
    top.set_ylabel("sync_account running")
    top.set_title("Running tasks per account (fair semaphore) and lock holders over time")
    top.legend(loc="upper right", fontsize="small")
    top.grid(alpha=0.3)

    lanes: list[str] = []
    for r in report.runs:
        if r["task"] == "refresh_cache" and r["outcome"] == "rebuilt":
            lane, color = f"cache:{r['user']}", "tab:blue"
        elif r["task"] == "generate_report":
            lane, color = f"report:{r['account']}", "tab:orange"
        else:
            continue
        if lane not in lanes:
            lanes.append(lane)
        y = lanes.index(lane)
        bottom.broken_barh(
            [(r["start"] - origin, r["end"] - r["start"])],
            (y - 0.35, 0.7),
            color=color,
            edgecolor="black",
            linewidth=0.5,
        )
    bottom.set_yticks(range(len(lanes)), lanes)
    bottom.set_ylabel("lock held by")
    bottom.set_xlabel("seconds since the first task was sent")
    bottom.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.resolve()


def _step(spans: list[tuple[float, float]]) -> tuple[list[float], list[int]]:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    xs, ys, running = [0.0], [0], 0
    for t, delta in events:
        running += delta
        xs.append(t)
        ys.append(running)
    return xs, ys
