"""Run the fault-injection suite: ``python -m tests.faults.run [--seconds N] [--seed S]``.

Two throwaway redis-servers: the *server under test* (locks and semaphores;
faults are injected into it) and the *recording server* (the history and
the protected resources; never faulted, so a restart of the server under
test loses neither).  ``--clients`` processes (default 16, two of them with
their clock skewed by +/- 5 minutes) contend for 3 locks and 2 semaphores
(limit 3) while the injector (``injector.py``) draws faults from the seed.
Then faults stop, the clients run on for a calm phase, are told to stop, and
the server under test must drain to no keys but the fence counters.  The
checker (``checker.py``) reads the history; the report has one row per
property.  The seed is printed first: ``--seed`` replays the fault schedule; the client
logs and the whole history (``history.jsonl``) stay in the printed directory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from celery_redislock.core.connection import client_from_url
from celery_redislock.core.leaseset import WAIT_LEASE
from celery_redislock.testing.servers import RedisServer

from .celery_run import run_celery
from .checker import Row, check
from .history import HOLDING_KEY, STOP_KEY, Recorder, load
from .injector import FAULTS, Fleet, Injector

PREFIX = "faults"


@dataclass
class Settings:
    seconds: float = 60.0  # fault phase
    seed: int = field(default_factory=lambda: random.randrange(2**31))
    clients: int = 16
    skewed: float = 300.0  # two clients run with time.time moved by +/- this
    ttl: float = 2.0
    socket_timeout: float = 2.0
    acquire_timeout: float = 20.0
    calm: float = 8.0  # fault-free phase at the end (liveness)
    grace: float = 1.0  # scheduling allowance on top of every time bound (loaded CI)
    work: tuple[float, float] = (0.02, 0.25)  # most holds; long_share of them 0.5-2 TTL
    long_share: float = 0.1
    locks: tuple[str, ...] = ("lock-a", "lock-b", "lock-c")
    semaphores: dict[str, int] = field(default_factory=lambda: {"sem-x": 3, "sem-y": 3})
    prefix: str = PREFIX
    faults: tuple[str, ...] = FAULTS  # the kinds to draw from
    mutants: tuple[str, ...] = ()  # self-test: break the clients (see client.py)
    celery: bool = True  # property 6 (celery worker subprocesses) after 1-5
    celery_seconds: float = 15.0
    # property 6 again with RabbitMQ as the broker, when it answers there
    amqp_url: str = field(
        default_factory=lambda: os.environ.get(
            "FAULTS_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"
        )
    )
    celery_backlog: int = 8
    celery_ttl: float = 3.0

    @classmethod
    def from_env(cls) -> Settings:
        """Short mode by default; ``FAULTS_LONG=1`` (10 min) or ``FAULTS_SECONDS=N``;
        ``FAULTS_SEED=S`` replays a schedule."""
        settings = cls(seconds=40.0)
        if os.environ.get("FAULTS_LONG"):
            settings.seconds = 600.0
        if os.environ.get("FAULTS_SECONDS"):
            settings.seconds = float(os.environ["FAULTS_SECONDS"])
        settings.celery_seconds = max(15.0, settings.seconds / 3)
        if os.environ.get("FAULTS_SEED"):
            settings.seed = int(os.environ["FAULTS_SEED"])
        return settings


@dataclass
class Outcome:
    rows: dict[str, Row]
    figures: dict[str, float]
    injected: dict[str, int]
    settings: Settings
    elapsed: float
    logdir: Path

    @property
    def violations(self) -> int:
        return sum(len(row.violations) for row in self.rows.values())

    def report(self) -> str:
        s = self.settings
        lines = [
            f"Fault-injection run: seed {s.seed}, {s.seconds:.0f} s of faults, {s.clients} "
            f"clients (2 with clocks skewed +/-{s.skewed:.0f} s), TTL {s.ttl} s, heartbeat "
            f"interval {s.ttl / 3:.2f} s; "
            + (
                f"then, per broker, {s.celery_seconds:.0f} s of kills of 2 celery prefork "
                f"workers (2 children each, TTL {s.celery_ttl} s); "
                if s.celery
                else ""
            )
            + f"{self.elapsed:.0f} s in all.",
            "Faults injected: "
            + ", ".join(f"{kind} {n}" for kind, n in self.injected.items())
            + f" (total {sum(self.injected.values())}).",
            "",
            "| property | operations checked | faults | violations | notes |",
            "|---|---:|---:|---:|---|",
        ]
        for key in sorted(self.rows):
            row = self.rows[key]
            lines.append(
                f"| {row.title} | {row.ops} | {row.faults} | {len(row.violations)} | "
                + "; ".join(row.notes)
                + " |"
            )
        f = self.figures
        lines += [
            "",
            f"Worst lease-loss detection delay: {f.get('worst_detection', float('nan')):+.2f} s "
            f"after the loss became observable (heartbeat interval {s.ttl / 3:.2f} s).",
            f"Worst crash recovery: a SIGKILLed holder's lease gone from Redis "
            f"{f.get('worst_freed', float('nan')):.2f} s after the kill, next holder in "
            f"{f.get('worst_next_holder', float('nan')):.2f} s (TTL {s.ttl} s).",
            f"Replay: FAULTS_SEED={s.seed} FAULTS_SECONDS={s.seconds:.0f} "
            "python -m pytest tests/faults (or python -m tests.faults.run --seed ...).",
        ]
        for key in sorted(self.rows):
            for v in self.rows[key].violations[:20]:
                lines.append(f"VIOLATION {key}: {v}")
        return "\n".join(lines)


def run(settings: Settings, logdir: Path | None = None) -> Outcome:
    began = time.monotonic()
    logdir = logdir or Path(tempfile.mkdtemp(prefix="redislock-faults-"))
    print(f"fault injection: seed {settings.seed}, logs in {logdir}", flush=True)
    with RedisServer() as recording, RedisServer() as under_test:
        rec_client = redis.Redis.from_url(recording.url, socket_timeout=30)
        rec = Recorder(rec_client, "inj")
        test_client = client_from_url(under_test.url, {"socket_timeout": 5})
        base = {
            "url": under_test.url,
            "rec_url": recording.url,
            "prefix": settings.prefix,
            "ttl": settings.ttl,
            "socket_timeout": settings.socket_timeout,
            "acquire_timeout": settings.acquire_timeout,
            "work": list(settings.work),
            "long_share": settings.long_share,
            "locks": list(settings.locks),
            "semaphores": settings.semaphores,
            "mutants": list(settings.mutants),
        }
        fleet = Fleet(base, logdir, settings.seed)
        injector = Injector(under_test, fleet, rec, test_client, settings.seed, settings)
        leaks = Row("5. no keys leaked once everything is released or expired")
        try:
            for i in range(settings.clients):
                skew = {0: settings.skewed, 1: -settings.skewed}.get(i, 0.0)
                fleet.spawn(skew)
            _wait(lambda: rec_client.hlen(HOLDING_KEY) > 0, 60, "a first holder")
            rec("phase", name="faults")
            injector.run(settings.seconds)
            rec("phase", name="calm")
            time.sleep(settings.calm)  # the calm phase: clients run without faults
            rec_client.set(STOP_KEY, 1)
            rec("phase", name="stop")
            for cid in fleet.wait_all(settings.acquire_timeout + 30):
                rec("reaped", victim=cid)
            _check_leaks(test_client, settings, leaks)
        finally:
            fleet.kill_all()
        events = load(rec_client)
        rec_client.close()
        test_client.close()
    with open(logdir / "history.jsonl", "w") as out:
        out.writelines(json.dumps(e, sort_keys=True) + "\n" for e in events)
    limits = dict.fromkeys(settings.locks, 1) | settings.semaphores
    rows, figures = check(events, settings, limits)
    rows["5"] = leaks
    leaks.faults = sum(injector.injected.values())
    injected = dict(injector.injected)
    if settings.celery:
        rows["6"], celery_injected = run_celery(
            settings.seed,
            settings.celery_seconds,
            settings.celery_backlog,
            settings.celery_ttl,
            logdir,
        )
        injected |= celery_injected
        figures |= rows["6"].figures
        if _reachable(settings.amqp_url):
            rows["6b"], amqp_injected = run_celery(
                settings.seed + 1,
                settings.celery_seconds,
                settings.celery_backlog,
                settings.celery_ttl,
                logdir,
                broker=settings.amqp_url,
            )
            rows["6b"].title = rows["6b"].title.replace("6.", "6b.", 1)
            injected = {k: n + amqp_injected.get(k, 0) for k, n in injected.items()}
        else:
            rows["6b"] = Row(f"6b. Celery with RabbitMQ: not run, {settings.amqp_url} unreachable")
    return Outcome(rows, figures, injected, settings, time.monotonic() - began, logdir)


def _check_leaks(client: Any, settings: Settings, row: Row) -> None:
    """Everything is released or expired within max(TTL, WAIT_LEASE): then only
    the fence counters (which expire 10 minutes after their last use) remain."""
    deadline = time.monotonic() + max(settings.ttl, WAIT_LEASE) + 10 + settings.grace
    while True:
        keys = sorted(k.decode() for k in client.scan_iter(match=f"{settings.prefix}:*"))
        others = [k for k in keys if not k.endswith(":fence")]
        if not others or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    row.ops = len(keys)
    row.violations += [f"key still present: {k} (PTTL {client.pttl(k)})" for k in others]
    for key in keys:
        if key.endswith(":fence") and not 0 < client.pttl(key) <= 600_000:
            row.violations.append(f"fence key {key} without its 10-minute expiry")
    row.notes.append(f"{len(keys)} keys left, all fence counters with an expiry")


def _reachable(url: str) -> bool:
    host_port = url.split("@")[-1].split("/")[0]
    host, _, port = host_port.partition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port or 5672)), timeout=2).close()
        return True
    except OSError:
        return False


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = Settings.from_env()
    parser.add_argument("--seconds", type=float, default=defaults.seconds)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--clients", type=int, default=defaults.clients)
    parser.add_argument("--no-celery", action="store_true", help="skip property 6")
    args = parser.parse_args()
    settings = Settings(
        seconds=args.seconds,
        seed=args.seed,
        clients=args.clients,
        celery=not args.no_celery,
        celery_seconds=max(15.0, args.seconds / 3),
    )
    outcome = run(settings)
    print(outcome.report())
    raise SystemExit(1 if outcome.violations else 0)


if __name__ == "__main__":
    main()
