"""Markdown tables and a PNG chart from one run's results (``results.json``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from . import coalesce_bench, limits_bench, metrics_bench, park_bench, rate_bench, redis_cost
from .celery_bench import CONTROL
from .contenders import BOOK_WITH_LOCK, OURS, OURS_SEM

Row = list[str]


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _table(header: Row, rows: list[Row]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _ratio(value: float, ours: float) -> str:
    if not ours or not value or math.isnan(value) or math.isnan(ours):
        return "-"
    return f"{value / ours:.2f}x"


def machine_section(m: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    load = ", ".join(f"{x:.1f}" for x in m["loadavg_at_start"])
    return (
        f"Measured {m['date']} on {m['nproc']} CPUs ({m['cpu']}), load average at start "
        f"{load}; {m['os']}; Python {m['python']}; redis-server {m['redis_server']} "
        f"(one server for every contender); {versions}.\n"
    )


def locks_section(r: dict[str, Any]) -> str:
    p = r["params"]
    c = r["contenders"]
    ours = c[OURS]
    rows = []
    for name, v in c.items():
        u, h, f = v["uncontended"], v["handoff"], v["fairness"]
        rows.append(
            [
                f"**{name}**" if name == OURS else name,
                _fmt(u["cycles_per_s"]),
                _ratio(u["cycles_per_s"], ours["uncontended"]["cycles_per_s"]),
                _fmt(h["p50_ms"], 2),
                _fmt(h["p99_ms"], 2),
                _fmt(h["handoffs"]),
                _fmt(h["self_reacquire_pct"], 0) + " %",
                _fmt(u["client_cmds_per_acq"], 1),
                _fmt(u.get("server_cpu_us"), 0),
            ]
        )
    speed = _table(
        [
            "lock",
            "uncontended acquire+release /s",
            "vs ours",
            f"hand-off p50 ms ({p['handoff_waiters']} waiters)",
            "hand-off p99 ms",
            "hand-offs seen",
            "re-taken by the releaser",
            "commands / acquisition (uncontended)",
            "Redis CPU µs / uncontended cycle",
        ],
        rows,
    )
    rows = []
    for name, v in c.items():
        f = v["fairness"]
        rows.append(
            [
                f"**{name}**" if name == OURS else name,
                _fmt(f["total"]),
                _fmt(f["min"]),
                _fmt(f["max"]),
                _fmt(f["min_over_mean"], 2),
                _fmt(f["client_cmds_per_acq"], 1),
                _fmt(f["server_cmds_per_acq"], 1),
            ]
        )
    fair = _table(
        [
            "lock",
            f"acquisitions in {p['fair_s']:g} s",
            "min per process",
            "max per process",
            "min / mean",
            "commands sent / acquisition",
            "Redis command calls / acquisition (incl. inside Lua)",
        ],
        rows,
    )
    crash = ""
    if all("crash" in v for v in c.values()):
        rows = []
        for name, v in c.items():
            cr = v["crash"]
            if not cr["held"]:
                left = "nothing"
            elif cr["never_expires"]:
                left = "the lock, **with no expiry** (held until someone deletes it)"
            else:
                left = f"the lock, for another {cr['expires_in_s']:.0f} s (its TTL)"
            rows.append([f"**{name}**" if name == OURS else name, left])
        crash = (
            "\n#### Locks: a holder SIGKILLed, library defaults (no TTL argument)\n\n"
            + _table(["lock", "left behind in Redis"], rows)
            + "\nOurs renews the lease while the holder lives, so its default TTL only "
            "bounds how long a dead holder blocks; in a Celery worker the main process "
            "releases a killed child's lease at once (see the Celery part).\n"
        )
    return (
        f"#### Locks: speed and hand-off (medians of {p['runs']} runs)\n\n{speed}\n"
        f"Uncontended: one process, one client per lock, every lock in turn in "
        f"{p.get('uncontended_slices', 1)} interleaved slices per run "
        f"({p['uncontended_s']:g} s per lock), so machine noise hits all alike.  "
        f"Hand-off = the releaser's `release()` call to the next holder's `acquire()` return, "
        f"in another process; 're-taken by the releaser' = acquisitions that went back to the "
        f"process that had just released (barging): a lock that is rarely handed over has "
        f"few hand-offs to measure, and starves the other processes instead.\n\n"
        f"#### Locks: fairness under contention ({p['fair_procs']} processes, "
        f"{p['fair_hold'] * 1000:g} ms hold, {p['fair_s']:g} s)\n\n{fair}\n"
        "'Commands sent' counts what the clients sent (a script call, FCALL or EVALSHA, is one); "
        "`INFO commandstats` also counts the commands a Lua script runs inside Redis.\n" + crash
    )


def semaphores_section(r: dict[str, Any]) -> str:
    p = r["params"]
    c = r["contenders"]
    counts = [str(n) for n in p["clients"]]
    many = counts[-1]
    ours = c[OURS_SEM][many]["ops_per_s"]
    book_lock = c[BOOK_WITH_LOCK][many]["ops_per_s"]
    rows = []
    for name, v in c.items():
        row = [f"**{name}**" if name.startswith("celery-redislock") else name]
        row += [_fmt(v[n]["ops_per_s"]) for n in counts]
        row.append(_ratio(v[many]["ops_per_s"], book_lock))
        highest = max(v[n]["max_concurrency"] for n in counts)
        over = any(v[n]["over_limit"] for n in counts)
        row.append(f"{highest} / {p['limit']}" + (" **OVER LIMIT**" if over else ""))
        row.append(_fmt(v[many]["lost_at_release"]))
        row.append(_fmt(v[many]["client_cmds_per_op"], 1))
        rows.append(row)
    table = _table(
        ["semaphore"]
        + [f"ops/s, {n} client{'s' if n != '1' else ''}" for n in counts]
        + [
            f"vs Redis in Action with lock ({many} clients)",
            "max concurrency seen / limit",
            "releases that found the slot gone",
            f"commands / op ({many} clients)",
        ],
        rows,
    )
    return (
        f"#### Semaphores (limit {p['limit']}, medians of {p['runs']} runs of "
        f"{p['seconds']:g} s; max concurrency is the maximum over all runs)\n\n{table}\n"
        f"An op is one successful acquire + release, holding the slot "
        f"{p['hold'] * 1000:g} ms with several clients (no hold with one client). A refused "
        f"non-blocking attempt retries after 1 ms. FairSemaphore throughput with "
        f"{many} clients: {_ratio(ours, book_lock)} Redis in Action's "
        "`acquire_semaphore_with_lock`.\n"
    )


def market_section(r: dict[str, Any]) -> str:
    p = r["params"]
    rows = []
    for row in r["rows"]:
        ours = row["mode"].endswith("(celery-redislock)")
        rows.append(
            [
                f"{row['sellers']} seller(s), {row['buyers']} buyer(s)",
                f"**{row['mode']}**" if ours else row["mode"],
                _fmt(row["listed"]),
                _fmt(row["bought"]),
                _fmt(row["retries"]),
                _fmt(row["avg_wait_ms"], 2) + " ms",
            ]
        )
    table = _table(
        ["load", "method", "listed", "bought", "purchase retries", "average purchase wait"],
        rows,
    )
    return (
        f"#### Redis in Action 6.2 market simulation, tables 1-3 "
        f"({p['seconds']:g} s per run instead "
        f"of 60 s; medians of {p['runs']} runs)\n\n{table}\n"
        "Average purchase wait = time buyers spent in purchase calls / items bought.\n"
    )


def _floor_note(calls: dict[str, Any], key: str) -> str:
    return f" (its floor {calls[key]:.2f} x)" if key in calls else ""


def _floors_text(calls: dict[str, Any]) -> str:
    """The per-call floors' sentence (absent from results written before they were measured)."""
    if "floor_lock_vs_control" not in calls:
        return ""
    return (
        "\nThe floors make the same round trips with the least scripts that keep the "
        "guarantees (`benchmarks/floors.py`, no library code): the lock's floor "
        f"{calls['floor_lock_vs_control']:.2f} x its control (LockedTask "
        f"{calls['locked_vs_floor']:.2f} x that floor), the guarded park's floor "
        f"{calls['floor_park_vs_control']:.2f} x its control (the park "
        f"{calls['park_vs_floor']:.2f} x that floor).\n"
    )


def celery_section(r: dict[str, Any]) -> str:
    out = []
    if r.get("missing"):
        out.append(f"Not measured: {r['missing']}\n")
    t = r.get("throughput")
    if t:
        base = t.get("plain Task", {}).get("tasks_per_s")
        rows = [
            [
                name,
                _fmt(v["tasks_per_s"]),
                _ratio(v["tasks_per_s"], base) if base else "-",
                _fmt(v["script_calls_per_task"], 2),
                _fmt(v["server_cmds_per_task"], 1),
                _fmt(v["extra_cmds_per_task"], 1),
                _fmt(v.get("worker_cpu_us"), 0),
                _fmt(v.get("redis_cpu_us"), 0),
            ]
            for name, v in t.items()
        ]
        p = r["params"]
        out.append(
            f"#### Celery: no-op tasks on one prefork worker (concurrency {p['concurrency']}, "
            f"{p['tasks']} tasks, {r.get('broker', 'Redis')} broker, medians of {p['runs']} "
            "runs)\n\n"
            + _table(
                [
                    "task base",
                    "tasks/s",
                    "vs plain Task",
                    "lock round trips / task (script calls)",
                    "Redis command calls / task (broker + lock, incl. inside Lua)",
                    "extra vs plain",
                    "worker CPU µs / task (main + children)",
                    "Redis CPU µs / task",
                ],
                rows,
            )
            + f"\n'{CONTROL}' is a plain task that also sends two `PING`s to Redis: the "
            "least any scheme that talks to Redis before and after the body can cost.  "
            "CPU: the worker's processes from /proc, Redis from `INFO cpu` (user + "
            "system, I/O included), over each run's window, divided by the tasks; the "
            "machine's cores are shared by all of them, so CPU per task is what sets the "
            "throughput.\n"
        )
    calls = r.get("calls")
    if calls:
        p = r["params"]
        rows = [
            [
                name,
                _fmt(v["calls_per_s"]),
                _fmt(v["script_calls_per_task"], 2),
                _fmt(v["server_cmds_per_task"], 1),
                _fmt(v.get("redis_cpu_us"), 0),
                _fmt(v.get("caller_cpu_us"), 0),
                _fmt(v.get("worker_cpu_us"), 0),
            ]
            for name, v in calls["rows"].items()
        ]
        out.append(
            f"\n#### Celery: what every call pays, a key per call ({p['calls']} calls per kind, "
            f"medians of {p['runs']} runs)\n\n"
            + _table(
                [
                    "kind",
                    "calls/s (first send to last body)",
                    "script calls / call",
                    "Redis command calls / call",
                    "Redis CPU µs / call",
                    "caller CPU µs / call (publishing)",
                    "worker CPU µs / call",
                ],
                rows,
            )
            + f"\nLockedTask vs its control: {calls['locked_vs_control']:.2f} x; SemaphoreTask "
            f"under park vs its control: {calls['park_vs_control']:.2f} x.  Each control is a "
            "plain task that makes the round trips of its kind as bare `PING`s: one before and "
            "one after the body (a lock's acquire and release), and for the park one more in "
            "the caller before the publish (the park decides at the call).  Calls are "
            "published while the worker consumes, so the caller's share counts.\n"
            + _floors_text(calls)
        )
    hb = r.get("heartbeat")
    if hb:
        out.append(
            f"\n#### Heartbeat cost with {hb['leases']} leases held in one process\n\n"
            + _table(
                [
                    "leases",
                    "interval",
                    "window",
                    "heartbeats",
                    "renewal calls (script calls)",
                    "calls per heartbeat",
                    "leases lost",
                ],
                [
                    [
                        _fmt(hb["leases"]),
                        f"{hb['interval_s']:g} s",
                        f"{hb['window_s']:.1f} s",
                        _fmt(hb.get("beats")),
                        _fmt(hb["refresh_calls"]),
                        _fmt(hb.get("calls_per_beat"), 2),
                        _fmt(hb["lost"]),
                    ]
                ],
            )
        )
    crash = r.get("crash")
    if crash:
        rows = [
            [
                name,
                v["what"],
                f"{v['ttl_s']:g} s" if v.get("ttl_s") else "none",
                f"{v['free_after_s']:.2f} s"
                if v.get("free_after_s") is not None
                else f"still held after {v['gave_up_after_s']:g} s (key TTL left: {v['ttl_left']})",
            ]
            for name, v in crash.items()
        ]
        out.append(
            "\n#### SIGKILL of the worker child running a locked task (ours: median of "
            f"{r['params']['runs']} kills)\n\n"
            + _table(["library", "lock", "lock TTL", "lock free again after"], rows)
        )
    return "\n".join(out)


def targets_section(results: dict[str, Any]) -> str:
    rows: list[Row] = []
    locks = results.get("locks")
    if locks:
        c = locks["contenders"]
        ours = c[OURS]
        best_peer = max((v["uncontended"]["cycles_per_s"], k) for k, v in c.items() if k != OURS)
        u = ours["uncontended"]["cycles_per_s"]
        rows.append(
            [
                "uncontended cycles >= fastest peer",
                f"{u:,.0f}/s vs {best_peer[1]} {best_peer[0]:,.0f}/s",
                _met(u >= best_peer[0]),
            ]
        )
        h = ours["handoff"]
        rows.append(["hand-off p50 < 1 ms", f"{h['p50_ms']:.2f} ms", _met(h["p50_ms"] < 1)])
        rows.append(["hand-off p99 < 5 ms", f"{h['p99_ms']:.2f} ms", _met(h["p99_ms"] < 5)])
        f = ours["fairness"]
        rows.append(
            [
                "no process below half the mean",
                f"min/mean {f['min_over_mean']:.2f}",
                _met(f["min_over_mean"] >= 0.5),
            ]
        )
        rows.append(
            [
                "commands / acquisition close to 2 under contention",
                f"{f['client_cmds_per_acq']:.2f} sent",
                _met(f["client_cmds_per_acq"] <= 2.5),
            ]
        )
    sems = results.get("semaphores")
    if sems:
        c = sems["contenders"]
        many = str(sems["params"]["clients"][-1])
        ratio = c[OURS_SEM][many]["ops_per_s"] / max(c[BOOK_WITH_LOCK][many]["ops_per_s"], 1e-9)
        rows.append(
            [
                f"semaphore >= 3x Redis in Action with lock ({many} clients)",
                f"{ratio:.2f}x",
                _met(ratio >= 3),
            ]
        )
        over = [
            k
            for k, v in c.items()
            if k.startswith("celery-redislock") and any(row["over_limit"] for row in v.values())
        ]
        rows.append(
            ["zero over-limit (ours)", "none" if not over else ", ".join(over), _met(not over)]
        )
    mkt = results.get("market")
    if mkt:
        ok = True
        detail = []
        for s, b in {(r["sellers"], r["buyers"]) for r in mkt["rows"]}:
            by = {r["mode"]: r for r in mkt["rows"] if (r["sellers"], r["buyers"]) == (s, b)}
            ours_row, book_row = (
                by["fine lock (celery-redislock)"],
                by["fine lock (Redis in Action)"],
            )
            ok &= ours_row["bought"] >= book_row["bought"] and ours_row["retries"] == 0
            detail.append(f"{s}/{b}: {ours_row['bought']:.0f} vs {book_row['bought']:.0f}")
        rows.append(
            [
                "market: ours >= Redis in Action fine lock on bought, 0 retries",
                "; ".join(sorted(detail)),
                _met(ok),
            ]
        )
    cel = results.get("celery", {})
    t = cel.get("throughput")
    if t and "plain Task" in t:
        base = t["plain Task"]["tasks_per_s"]
        for name, v in t.items():
            if name not in ("plain Task", CONTROL):
                overhead = 100 * (1 - v["tasks_per_s"] / base)
                rows.append(
                    [f"Celery {name} overhead <= 10 %", f"{overhead:.1f} %", _met(overhead <= 10)]
                )
    calls = cel.get("calls")
    if calls:
        rows.append(
            [
                "LockedTask >= 0.95 x its control (a key per call)",
                f"{calls['locked_vs_control']:.2f} x" + _floor_note(calls, "floor_lock_vs_control"),
                _met(calls["locked_vs_control"] >= 0.95),
            ]
        )
        rows.append(
            [
                "SemaphoreTask (park) >= 0.9 x its control (a key per call)",
                f"{calls['park_vs_control']:.2f} x" + _floor_note(calls, "floor_park_vs_control"),
                _met(calls["park_vs_control"] >= 0.9),
            ]
        )
    hb = cel.get("heartbeat")
    if hb:
        rows.append(
            [
                "heartbeat: one batched call per interval per process",
                f"{hb['calls_per_beat']:.2f} calls / beat for {hb['leases']} leases",
                _met(hb["calls_per_beat"] <= 1.0),
            ]
        )
    if not rows:
        return ""
    return "#### Targets\n\n" + _table(["target", "measured", "met"], rows)


def _met(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def markdown(results: dict[str, Any]) -> str:
    parts = [
        f"### Benchmark results ({results['mode']} run)\n",
        machine_section(results["machine"]),
    ]
    parts.append(
        "Regenerate with `make bench` (`python -m benchmarks`; `--quick` for a one-minute "
        "development run). "
        f"This run took {results.get('elapsed_s', 0):.0f} s.\n"
    )
    for key, render in (
        ("locks", locks_section),
        ("cost", redis_cost.section),
        ("semaphores", semaphores_section),
        ("market", market_section),
        ("celery", celery_section),
        ("backlog", park_bench.section),
        ("rate", rate_bench.section),
        ("limits", limits_bench.section),
        ("metrics", metrics_bench.section),
        ("coalesce", coalesce_bench.section),
    ):
        if key in results:
            parts.append(render(results[key]))
    targets = targets_section(results)
    if targets:
        parts.append(targets)
    return "\n".join(parts)


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    locks = results.get("locks")
    if locks:
        c = locks["contenders"]
        names = [_short(n) for n in c]
        panels.append(
            (
                "uncontended lock cycles/s",
                names,
                {"cycles/s": [v["uncontended"]["cycles_per_s"] for v in c.values()]},
                False,
            )
        )
        panels.append(
            (
                "lock hand-off latency (ms, log)",
                names,
                {
                    "p50": [v["handoff"]["p50_ms"] for v in c.values()],
                    "p99": [v["handoff"]["p99_ms"] for v in c.values()],
                },
                True,
            )
        )
        procs = locks["params"]["fair_procs"]
        panels.append(
            (
                f"fairness: acquisitions per process ({procs} procs)",
                names,
                {
                    "min": [v["fairness"]["min"] for v in c.values()],
                    "max": [v["fairness"]["max"] for v in c.values()],
                },
                False,
            )
        )
    sems = results.get("semaphores")
    if sems:
        c = sems["contenders"]
        names = [_short(n) for n in c]
        series = {
            f"{n} clients": [v[str(n)]["ops_per_s"] for v in c.values()]
            for n in sems["params"]["clients"]
        }
        panels.append(("semaphore ops/s", names, series, False))
    mkt = results.get("market")
    if mkt:
        loads = sorted({(r["sellers"], r["buyers"]) for r in mkt["rows"]})
        modes = list(dict.fromkeys(r["mode"] for r in mkt["rows"]))
        series = {
            m: [
                next(
                    r["bought"]
                    for r in mkt["rows"]
                    if r["mode"] == m and (r["sellers"], r["buyers"]) == load
                )
                for load in loads
            ]
            for m in modes
        }
        panels.append(("market: items bought", [f"{s}/{b}" for s, b in loads], series, False))
    t = results.get("celery", {}).get("throughput")
    if t:
        panels.append(
            (
                "Celery no-op tasks/s",
                list(t),
                {"tasks/s": [v["tasks_per_s"] for v in t.values()]},
                False,
            )
        )
    if not panels:
        return
    cols = 2
    rows_n = (len(panels) + 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(13, 4.2 * rows_n), squeeze=False)
    for ax, (title, labels, series, log) in zip(axes.flat, panels, strict=False):
        width = 0.8 / len(series)
        for i, (label, values) in enumerate(series.items()):
            xs = [x + i * width for x in range(len(labels))]
            ax.bar(xs, [0 if v is None or v != v else v for v in values], width, label=label)
        ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(labels))])
        ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        if log:
            ax.set_yscale("log")
        if len(series) > 1:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(
        f"celery-redislock benchmarks ({results['mode']} run, {results['machine']['date']})"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _short(name: str) -> str:
    return (
        name.replace("celery-redislock ", "ours: ")
        .replace("acquire_lock_with_timeout", "lock_with_timeout")
        .replace(" (1 master)", "")
        .replace("(blocking, FIFO)", "(blocking)")
    )


BEGIN, END = "<!-- benchmarks:begin (generated by make bench) -->", "<!-- benchmarks:end -->"


def update_results_page(page: Path, text: str) -> bool:
    """Replace the generated block of ``docs/benchmarks.md`` with ``text``.

    Only the part between the BEGIN and END markers changes; False (and
    nothing written) if the page has no such block.
    """
    content = page.read_text()
    start, end = content.find(BEGIN), content.find(END)
    if start < 0 or end < start:
        return False
    body = text.split("\n", 1)[1]  # without the title line
    page.write_text(content[: start + len(BEGIN)] + "\n" + body.strip() + "\n" + content[end:])
    return True
