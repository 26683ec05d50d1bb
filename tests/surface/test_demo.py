"""The demo's scenario, shortened, with the demo's own assertions.

The real command (``python -m example_worker.demo --small``) runs against
the test Redis: it starts a real prefork ``celery worker``, sends the
stampede, the skewed backlog and the report queue, and checks its
expectations from what the task bodies recorded.  The report checks are
also shown to fail on records that violate them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml  # type: ignore[import-untyped]

from example_worker.demo import worker_command, worker_process
from example_worker.records import Recorder
from example_worker.report import build_report, max_overlap
from example_worker.scenario import SMALL, Scenario
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def demo_env(redis_url: str) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1"}


def test_demo_small_scenario_meets_every_expectation(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "example_worker.demo", "--small", "--output", str(tmp_path)],
        cwd=ROOT,
        env=demo_env(redis_url),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all expectations met" in out.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["drained"] and report["violations"] == []

    # Single flight: one rebuild per user; every request accounted for, and
    # the stampede really did contend (duplicates were skipped).
    for user in report["users"].values():
        assert user["sent"] == SMALL.requests_per_user
        assert user["rebuilt"] == 1
        assert user["rebuilt"] + user["fresh"] + user["skipped"] == user["sent"]
    assert report["locks"]["skipped"] > 0

    # Per-account cap: reached by the heavy account, never exceeded; every
    # job ran exactly once; the light accounts were not starved.
    heavy = report["accounts"]["acme"]
    # Policy park: contended jobs were parked in Redis, none requeued.
    assert heavy["max_running"] == 5 and heavy["parked"] > 0 and heavy["requeues"] == 0
    for name, account in report["accounts"].items():
        assert account["ran"] == account["sent"] and account["ran_twice"] == []
        assert account["max_running"] <= 5
        if name != "acme":
            assert account["done_at"] < heavy["done_at"]
            assert account["wait_max"] < heavy["wait_max"]

    # One report at a time, fencing tokens rising in run order.
    assert report["reports"]["ran"] == SMALL.reports
    assert report["reports"]["overlaps"] == 0 and report["reports"]["tokens_rising"]
    assert report["locks"]["lost"] == 0
    assert report["locks"]["released"] == report["locks"]["acquired"]

    picture = tmp_path / "timeline.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(picture) in out.stdout

    # Everything it started is gone, and so are its keys.
    worker_pid = int(re.search(r"\(pid (\d+),", out.stdout).group(1))  # type: ignore[union-attr]
    assert not pid_alive(worker_pid)
    namespace = re.search(r"namespace (demo-[0-9a-f]+)", out.stdout).group(1)  # type: ignore[union-attr]
    assert list(redis_client.scan_iter(match=f"{namespace}*", count=1000)) == []
    assert not redis_client.exists(f"_kombu.binding.{namespace}")


def test_ctrl_c_stops_the_worker_it_started(redis_url: str, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "example_worker.demo", "--small", "--output", str(tmp_path)],
        cwd=ROOT,
        env=demo_env(redis_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not any(line.startswith("sent ") for line in lines):
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        worker_pid = int(re.search(r"\(pid (\d+),", "".join(lines)).group(1))  # type: ignore[union-attr]
        assert pid_alive(worker_pid)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode == 130, "".join(lines) + rest
    assert "interrupted: worker and Redis stopped" in rest
    wait_for(lambda: not pid_alive(worker_pid), timeout=30, message="the worker to be gone")


# -- the report's checks can fail ---------------------------------------------------------


@pytest.fixture
def recorder(redis_url: str) -> Iterator[Recorder]:
    rec = Recorder(redis.Redis.from_url(redis_url), f"t-report-{uuid.uuid4().hex[:8]}")
    yield rec
    rec.clear()
    rec.client.close()


TINY = Scenario(
    users=1, requests_per_user=3, heavy_jobs=6, light_accounts=1, light_jobs=1, reports=2
)


def record_good_run(rec: Recorder) -> None:
    rec.sent(
        {f"h{j}": 0.0 for j in range(6)} | {"l0": 0.0},
        {
            "refresh_cache|cache:1": 3,
            "sync_account|account:acme": 6,
            "sync_account|account:light-1": 1,
            "generate_report|report:acme": 2,
        },
    )
    rec.run(task="refresh_cache", user=1, outcome="rebuilt", token=1, start=0.0, end=2.0)
    rec.run(task="refresh_cache", user=1, outcome="fresh", start=2.5, end=2.6)
    rec.count("contended", "cache:1|skip")
    for j in range(6):  # five at once, the sixth after the first ends
        start = 0.0 if j < 5 else 1.0
        rec.run(
            task="sync_account",
            account="acme",
            job=j,
            task_id=f"h{j}",
            token=j,
            start=start + 1.0,
            end=start + 2.0,
        )
    rec.run(
        task="sync_account", account="light-1", job=0, task_id="l0", token=9, start=0.1, end=0.5
    )
    rec.run(task="generate_report", account="acme", task_id="r1", token=10, start=0, end=1)
    rec.run(task="generate_report", account="acme", task_id="r2", token=11, start=1, end=2)


def test_report_of_a_good_run_has_no_violations(recorder: Recorder) -> None:
    record_good_run(recorder)
    report = build_report(recorder, TINY, drained=True)
    assert report.violations == []
    assert report.accounts["acme"]["max_running"] == 5
    assert "all expectations met" in report.text()


@pytest.mark.parametrize(
    ("extra", "violation"),
    [
        (
            {
                "task": "refresh_cache",
                "user": 1,
                "outcome": "rebuilt",
                "token": 2,
                "start": 3.0,
                "end": 4.0,
            },
            "user 1: 2 rebuilds, expected 1",
        ),
        (
            {
                "task": "sync_account",
                "account": "acme",
                "job": 5,
                "task_id": "h5",
                "token": 20,
                "start": 1.5,
                "end": 1.6,
            },
            "account acme: 6 ran at once, limit 5",
        ),
        (
            {
                "task": "generate_report",
                "account": "acme",
                "task_id": "r3",
                "token": 12,
                "start": 0.5,
                "end": 0.7,
            },
            "reports: 1 runs overlapped under one lock",
        ),
        (
            {
                "task": "sync_account",
                "account": "light-1",
                "job": 1,
                "task_id": "l1",
                "token": 30,
                "start": 5.0,
                "end": 9.0,
            },
            "account light-1 starved by 'acme'",
        ),
    ],
)
def test_report_flags_violations(recorder: Recorder, extra: dict[str, Any], violation: str) -> None:
    record_good_run(recorder)
    recorder.run(**extra)
    report = build_report(recorder, TINY, drained=True)
    assert any(v.startswith(violation) for v in report.violations), report.violations
    assert "EXPECTATIONS VIOLATED" in report.text()


def test_report_flags_lost_leases_undrained_runs_and_unaccounted_requests(
    recorder: Recorder,
) -> None:
    record_good_run(recorder)
    recorder.append("lost", name="cache:1", reason="gone")
    recorder.count("sent", "refresh_cache|cache:1")  # a fourth request nobody handled
    report = build_report(recorder, TINY, drained=False)
    text = "\n".join(report.violations)
    assert "1 lease(s) lost while running" in text
    assert "not every task finished in time" in text
    assert "user 1: 4 requests but 1 rebuilt + 1 fresh + 1 skipped" in text


def test_max_overlap_counts_touching_intervals_as_sequential() -> None:
    assert max_overlap([]) == 0
    assert max_overlap([(0, 1), (1, 2), (2, 3)]) == 1
    assert max_overlap([(0, 2), (1, 3), (1.5, 1.6)]) == 3


# -- docker compose: the same app, settings and scenario ----------------------------------


def test_docker_compose_runs_the_demo_app_with_the_demo_settings() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["redis"]["image"] == "redis:7"
    worker, producer = services["worker"], services["producer"]
    assert worker["command"] == worker_command(8)  # exactly what the demo starts
    replicas = worker["deploy"]["replicas"]
    assert replicas >= 2
    assert producer["command"][:3] == ["python", "-m", "example_worker.producer"]
    assert producer["command"][producer["command"].index("--workers") + 1] == str(replicas)
    for service in (worker, producer):
        env = service["environment"]
        assert env["REDIS_URL"] == "redis://redis:6379/0"
        assert set(env) == {"REDIS_URL", "EXAMPLE_NAMESPACE"}  # what example_worker reads
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        dockerfile = ROOT / service["build"]["dockerfile"]
        copied = [
            line.split()[1]
            for line in dockerfile.read_text().splitlines()
            if line.startswith("COPY")
        ]
        assert all((ROOT / path).exists() for path in copied)
        assert "python:3.11-slim" in dockerfile.read_text()


def test_producer_command_drives_two_workers_as_docker_compose_does(
    redis_url: str, tmp_path: Path
) -> None:
    namespace = f"t-compose-{uuid.uuid4().hex[:8]}"
    env = {**demo_env(redis_url), "EXAMPLE_NAMESPACE": namespace}
    recorder = Recorder(redis.Redis.from_url(redis_url), namespace)
    try:
        with contextlib.ExitStack() as stack:
            # 2 x 4 = the demo's 8 processes: with fewer, the heavy account may
            # stay below its cap of 5 beside the cache rebuilds, is never
            # requeued, and its backlog delays the light ones by queue order.
            for index in (1, 2):
                stack.enter_context(
                    worker_process(redis_url, namespace, 4, tmp_path / f"w{index}.log", index)
                )
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "example_worker.producer",
                    "--small",
                    "--workers",
                    "2",
                    "--output",
                    str(tmp_path),
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
            )
            assert len(recorder.ready_workers()) == 2, out.stdout + out.stderr
        assert out.returncode == 0, out.stdout + out.stderr
        assert "all expectations met" in out.stdout
        report = json.loads((tmp_path / "report.json").read_text())
        assert all(u["rebuilt"] == 1 for u in report["users"].values())
        assert all(a["max_running"] <= 5 for a in report["accounts"].values())
        assert (tmp_path / "timeline.png").exists()
    finally:
        recorder.clear()
        recorder.drop_queue()
        recorder.client.close()
