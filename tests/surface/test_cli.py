"""``celery redislock``: status / release against locks held by real processes.

Holders are separate Python processes (``tests/holder_proc.py``) on the real
test Redis; the command runs through Celery's own ``celery`` entry group (the
plugin is found through the ``celery.commands`` entry point), once as a real
``celery`` subprocess.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest
import redis
from celery import Celery
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner, Result

from celery_redislock import FairSemaphore, RateLimiter, RedisLock
from celery_redislock.admin.top import CLEAR, watch
from celery_redislock.core.capacity import Capacity
from celery_redislock.core.connection import client_from_url
from celery_redislock.core.override import Overrides
from celery_redislock.core.park import ParkConfig, Parking, Verdict
from celery_redislock.parking import discard
from celery_redislock.testing.servers import RedisServer, free_port
from devtools.engines import SentinelGroup
from example_worker.demo import stop_group, worker_process
from example_worker.producer import wait_for_workers
from example_worker.records import Recorder
from tests import cli_app
from tests.processes import interruptible, reap
from tests.waiting import wait_for

ONE_SLOT = Capacity.semaphore(1)
LOCK = Capacity.lock()

ROOT = Path(__file__).resolve().parents[2]


class Holder:
    """A holder process and what it reported."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.info: dict[str, Any] = {}

    def wait_held(self, timeout: float = 30.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until acquired (or exit)
        assert line, f"holder exited: {self.proc.wait(timeout)}"
        self.info = json.loads(line)
        return self.info

    def read_line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def finish(self) -> list[str]:
        """Close stdin (release if still held); the lines it printed after holding."""
        out, _ = self.proc.communicate("", timeout=30)
        return out.split()


@pytest.fixture
def spawn(redis_url: str, prefix: str) -> Iterator[Callable[..., Holder]]:
    procs: list[subprocess.Popen[str]] = []

    def _spawn(name: str, slots: int = 1, ttl: float = 30.0, **meta: Any) -> Holder:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.holder_proc",
                redis_url,
                prefix,
                name,
                str(slots),
                str(ttl),
                json.dumps(meta),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        procs.append(proc)
        return Holder(proc)

    yield _spawn
    reap(procs)


@pytest.fixture
def app_module(redis_url: str, prefix: str) -> Iterator[str]:
    conf = cli_app.app.conf
    saved = (conf.broker_url, conf.redislock_prefix)
    conf.broker_url, conf.redislock_prefix = redis_url, prefix
    yield "tests.cli_app"
    conf.broker_url, conf.redislock_prefix = saved


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(celery_main, list(args), input=input, catch_exceptions=False)


def status_json(app: str) -> dict[str, Any]:
    result = run("-A", app, "redislock", "status", "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in data["lease_sets"]}


def test_status_lists_holders_and_waiters_of_other_processes(
    app_module: str, spawn: Callable[..., Holder]
) -> None:
    report = spawn("report:42", task_id="t-1", task="proj.report", limit=1)
    held = report.wait_held()
    slots = [spawn("account:7", slots=2, task_id=f"s-{i}") for i in range(2)]
    for s in slots:
        s.wait_held()
    queued = spawn("account:7", slots=2, task_id="s-queued")  # waits in the queue

    def queued_up() -> dict[str, Any] | None:
        data = status_json(app_module)
        return data if by_name(data).get("account:7", {}).get("waiting") else None

    data = wait_for(queued_up, timeout=30, message="the third account:7 process to queue")
    assert data is not None
    sets = by_name(data)
    assert set(sets) == {"report:42", "account:7"}
    lock = sets["report:42"]
    assert lock["kind"] == "lock" and lock["limit"] == 1 and lock["held"] == 1
    (holder,) = lock["holders"]
    assert holder["token"] == held["token"]
    assert holder["owner"] == held["owner"]
    assert holder["pid"] == held["pid"] == report.proc.pid
    assert holder["task_id"] == "t-1" and holder["task"] == "proj.report"
    assert 0 <= holder["age"] < 120
    assert 0 < holder["expires_in"] <= holder["ttl"] == 30.0
    sem = sets["account:7"]
    assert sem["held"] == 2 and sem["waiting"] == 1
    assert {h["task_id"] for h in sem["holders"]} == {"s-0", "s-1"}
    assert sem["waiters"][0]["task_id"] == "s-queued"
    assert sem["waiters"][0]["pid"] == queued.proc.pid
    assert data["held"] == 3 and data["waiting"] == 1

    text = run("-A", app_module, "redislock", "status")
    assert text.exit_code == 0, text.output
    assert "report:42  [lock]  held 1/1  waiting 0" in text.stdout
    assert "account:7  [semaphore]  held 2  waiting 1" in text.stdout
    assert str(held["token"]) in text.stdout and held["owner"] in text.stdout
    assert f":{report.proc.pid}" in text.stdout and "proj.report" in text.stdout
    assert "waiting #1: task s-queued" in text.stdout

    only = run("-A", app_module, "redislock", "status", "--json", "--match", "report:*")
    assert [e["name"] for e in json.loads(only.stdout)["lease_sets"]] == ["report:42"]


def test_force_release_hands_the_slot_to_the_waiter_and_the_holder_sees_it_lost(
    app_module: str, spawn: Callable[..., Holder]
) -> None:
    first = spawn("report:1", ttl=3.0, task_id="first")
    info = first.wait_held()
    second = spawn("report:1", ttl=3.0, task_id="second")
    wait_for(
        lambda: by_name(status_json(app_module))["report:1"]["waiting"] == 1,
        timeout=30,
        message="the second process to queue",
    )

    refused = run("-A", app_module, "redislock", "release", "report:1", input="n\n")
    assert refused.exit_code == 1
    assert "NOT stopped" in refused.stdout and "Aborted" in refused.output
    assert by_name(status_json(app_module))["report:1"]["holders"][0]["task_id"] == "first"

    done = run("-A", app_module, "redislock", "release", "report:1", "--json", input="y\n")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout[done.stdout.index("{") :])
    assert [r["token"] for r in report["released"]] == [info["token"]]

    # FIFO hand-off: the waiting process now holds it, with a higher token.
    second_info = second.wait_held()
    assert second_info["token"] > info["token"]
    holders = by_name(status_json(app_module))["report:1"]["holders"]
    assert [h["task_id"] for h in holders] == ["second"]
    # The forcibly released process learns from its heartbeat (ttl/3 = 1 s).
    assert first.read_line() == "lost"
    assert first.finish() == ["was", "lost"]
    assert second.finish() == ["released"]


def test_release_of_one_owner_with_force_leaves_the_others(
    app_module: str, spawn: Callable[..., Holder]
) -> None:
    holders = [spawn("pool", slots=3, task_id=f"p{i}") for i in range(3)]
    infos = [h.wait_held() for h in holders]
    result = run(
        "-A", app_module, "redislock", "release", "pool", "--owner", infos[1]["owner"], "--force"
    )
    assert result.exit_code == 0, result.output
    assert f"released 'pool' token {infos[1]['token']}" in result.stdout
    assert "already gone" not in result.stdout  # one truthful line per slot
    assert result.stdout.count(str(infos[1]["token"])) == 1
    left = by_name(status_json(app_module))["pool"]["holders"]
    assert sorted(h["owner"] for h in left) == sorted([infos[0]["owner"], infos[2]["owner"]])

    wrong = run("-A", app_module, "redislock", "release", "pool", "--owner", "nobody", "-f")
    assert wrong.exit_code == 2 and "not a current holder of 'pool': nobody" in wrong.output


def test_unknown_key_is_an_error(app_module: str, redis_client: redis.Redis, prefix: str) -> None:
    result = run("-A", app_module, "redislock", "release", "no-such-lock", "--force")
    assert result.exit_code == 2
    assert "unknown key: nothing holds 'no-such-lock'" in result.output
    bad = run("-A", app_module, "redislock", "release", "a{b", "--force")
    assert bad.exit_code == 2 and "must not contain" in bad.output
    empty = run("-A", app_module, "redislock", "status")
    assert empty.exit_code == 0 and "nothing held or waiting" in empty.stdout

    # A full key is accepted as well as a name.
    lock = RedisLock(redis_client, "by-key", prefix=prefix)
    assert lock.acquire()
    result = run("-A", app_module, "redislock", "release", f"{prefix}:{{by-key}}:holders", "-f")
    assert result.exit_code == 0, result.output
    assert not lock.locked()
    assert not lock.refresh()


def test_pause_and_resume_a_key_from_the_shell(
    app_module: str, redis_client: redis.Redis, prefix: str
) -> None:
    limiter = RateLimiter(redis_client, "api:acme", rate="10/s", prefix=prefix)
    paused = run("-A", app_module, "redislock", "pause", "api:acme", "30")
    assert paused.exit_code == 0 and "paused 'api:acme' for 30 s" in paused.output
    assert 29 < limiter.paused_for() <= 30
    shown = run("-A", app_module, "redislock", "parked", "api:acme")
    assert shown.exit_code == 0 and "api:acme  [parked]  0 parked" in shown.output
    assert "paused 29." in shown.output or "paused 30.0s" in shown.output, shown.output
    refused = limiter.try_acquire()
    assert not refused and refused.retry_after > 29
    shorter = run("-A", app_module, "redislock", "pause", "api:acme", "5")
    assert shorter.exit_code == 0 and limiter.paused_for() > 29  # a pause only lengthens
    resumed = run("-A", app_module, "redislock", "resume", "api:acme")
    assert resumed.exit_code == 0 and "resumed 'api:acme'" in resumed.output
    assert limiter.paused_for() == 0 and limiter.try_acquire()
    for args, expected in [
        (["pause", "api:acme", "0"], "SECONDS"),
        (["pause", "api:acme", "soon"], "SECONDS"),
        (["pause", "a{b", "5"], "bad NAME 'a{b'"),
        (["resume", "a{b"], "bad NAME 'a{b'"),
        (["discard-parked", "a{b", "--force"], "bad NAME 'a{b'"),
        (["discard-parked", "a{b"], "bad NAME 'a{b'"),  # before asking to confirm
        (["parked", "a{b"], "bad NAME 'a{b'"),
        (["parked", "ok", ""], "bad NAME ''"),
    ]:
        result = run("-A", app_module, "redislock", *args)
        assert result.exit_code == 2, result.output
        assert expected in result.output and "Traceback" not in result.output


def test_override_a_keys_limit_and_rate_from_the_shell(
    app_module: str, redis_client: redis.Redis, prefix: str
) -> None:
    """``limit set / show / clear``: stored in Redis, used by the next
    decision of every client, and one line with exit status 2 for bad input."""
    slots = [FairSemaphore(redis_client, "acct:9", 1, ttl=10, prefix=prefix) for _ in range(3)]
    limiter = RateLimiter(redis_client, "acct:9", rate="1/h", prefix=prefix)
    raised = run(
        "-A",
        app_module,
        "redislock",
        "limit",
        "set",
        "acct:9",
        "--limit",
        "2",
        "--rate",
        "500/m",
        "--burst",
        "3",
    )
    assert raised.exit_code == 0, raised.output
    assert "'acct:9' runs by: limit 2, rate 500/m burst 3" in raised.output
    assert [s.acquire(blocking=False) for s in slots] == [True, True, False]
    assert all(limiter.try_acquire() for _ in range(3))  # the override's burst, not the code's 1
    shown = run("-A", app_module, "redislock", "limit", "show")
    assert shown.exit_code == 0 and "acct:9  limit 2, rate 500/m burst 3" in shown.output
    as_json = json.loads(
        run("-A", app_module, "redislock", "limit", "show", "acct:9", "--json").output
    )
    assert as_json == {"acct:9": {"limit": 2, "rate": "500/m", "burst": 3}}
    only_rate = run("-A", app_module, "redislock", "limit", "clear", "acct:9", "--only", "rate")
    assert only_rate.exit_code == 0 and "runs by: limit 2" in only_rate.output
    cleared = run("-A", app_module, "redislock", "limit", "clear", "acct:9")
    assert cleared.exit_code == 0 and "runs by: the values in the code" in cleared.output
    assert not limiter.try_acquire()  # the code's 1/h again
    for s in slots[:2]:
        s.release()
    for args, expected in [
        (["limit", "set", "acct:9"], "give --limit, --rate or both"),
        (["limit", "set", "acct:9", "--limit", "0"], "--limit"),
        (["limit", "set", "acct:9", "--rate", "fast"], "--rate must look like"),
        (["limit", "set", "acct:9", "--limit", "3", "--burst", "2"], "--burst goes with --rate"),
        (["limit", "set", "a{b", "--limit", "2"], "bad NAME 'a{b'"),
        (["limit", "clear", "acct:9", "--only", "both"], "--only"),
        (["limit", "frobnicate"], "No such command"),
    ]:
        result = run("-A", app_module, "redislock", *args)
        assert result.exit_code == 2, result.output
        assert expected in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert run("-A", app_module, "redislock", "limit", "show").output.strip() == "no overrides"


def test_unreachable_redis_and_missing_app_get_clear_messages() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    down = run("redislock", "--url", url, "status")
    assert down.exit_code == 1
    assert f"cannot reach Redis at {url}" in down.output

    secret = run("redislock", "--url", "redis://user:hunter2@127.0.0.1:1/0", "status")
    assert "hunter2" not in secret.output and "user:***@127.0.0.1:1" in secret.output

    missing = run("-A", "no_such_module_xyz", "redislock", "status")
    assert missing.exit_code == 2
    assert "Unable to load celery application" in missing.output
    assert "no_such_module_xyz" in missing.output

    conf = cli_app.app.conf
    saved, conf.broker_url = conf.broker_url, "amqp://guest@127.0.0.1//"
    try:
        no_redis = run("-A", "tests.cli_app", "redislock", "status")
    finally:
        conf.broker_url = saved
    assert no_redis.exit_code == 2
    assert "set redislock_url" in no_redis.output and "-A" in no_redis.output


def test_large_keyspace_is_scanned_never_keys(own_redis: RedisServer) -> None:
    client = redis.Redis.from_url(own_redis.url)
    for start in range(0, 100_000, 5000):
        client.mset({f"noise:{i}": "x" for i in range(start, start + 5000)})
    locks = [RedisLock(client, f"job:{i}", ttl=60) for i in range(300)]
    for lock in locks:
        assert lock.acquire()
    client.config_resetstat()

    result = run(
        "redislock",
        "--url",
        own_redis.url,
        "--prefix",
        "redislock",
        "status",
        "--json",
        "--waiters",
        "0",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {e["name"] for e in data["lease_sets"]} == {f"job:{i}" for i in range(300)}
    stats = client.info("commandstats")
    assert "cmdstat_keys" not in stats
    assert stats["cmdstat_scan"]["calls"] >= 50  # walked in steps, not in one call
    for lock in locks:
        lock.release()
    client.close()


def test_no_app_given_is_said_plainly() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "celery", "redislock", "status"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "no Celery app given: run `celery -A yourproject redislock ...`" in out.stderr


def test_real_celery_command_finds_the_plugin(redis_url: str, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    lock = RedisLock(client, "via-subprocess", prefix=prefix, meta={"task_id": "sub"})
    assert lock.acquire()
    try:
        env = {**os.environ, "CLI_APP_REDIS_URL": redis_url, "CLI_APP_PREFIX": prefix}
        out = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "tests.cli_app", "redislock", "status"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert "via-subprocess  [unknown]  held 1  waiting 0" in out.stdout
        assert str(lock.token) in out.stdout and "sub" in out.stdout
    finally:
        lock.release()
        client.close()


# -- against a real worker running the example app -----------------------------------------


def celery_cli(redis_url: str, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": redis_url, "EXAMPLE_NAMESPACE": namespace}
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "example_worker.app", "redislock", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_status_and_release_of_locks_held_by_a_real_worker(redis_url: str, tmp_path: Path) -> None:
    namespace = f"t-cli-{uuid.uuid4().hex[:8]}"
    recorder = Recorder(redis.Redis.from_url(redis_url), namespace)
    sender = Celery("sender", broker=redis_url)
    try:
        with worker_process(redis_url, namespace, 2, tmp_path / "worker.log") as worker:
            wait_for_workers(recorder, 1, timeout=120, alive=lambda: worker.poll() is None)
            task = "example_worker.app.generate_report"
            first = sender.send_task(task, ("cli", 60), queue=namespace)

            def lock_state() -> dict[str, Any]:
                out = celery_cli(redis_url, namespace, "status", "--json")
                assert out.returncode == 0, out.stderr
                sets = by_name(json.loads(out.stdout))
                return sets.get("report:cli", {"holders": [], "waiters": []})

            wait_for(lambda: lock_state()["holders"], timeout=60, message="the first report")
            second = sender.send_task(task, ("cli", 0.1), queue=namespace)
            state = wait_for(
                lambda: (s := lock_state())["waiters"] and s, timeout=60, message="a waiter"
            )
            assert state["kind"] == "lock" and state["limit"] == 1  # from the task class
            (holder,) = state["holders"]
            assert holder["task_id"] == first.id
            assert holder["task"] == task
            # the celery layer records task id and limit in the holder's metadata itself
            (raw,) = RedisLock(recorder.client, "report:cli", prefix=namespace).holders()
            assert raw.meta["task_id"] == first.id and raw.meta["limit"] == 1
            assert holder["host"] == socket.gethostname()
            assert holder["pid"] in [c.pid for c in psutil.Process(worker.pid).children()]
            assert 0 < holder["expires_in"] <= holder["ttl"] == 10.0
            assert [w["task_id"] for w in state["waiters"]] == [second.id]

            text = celery_cli(redis_url, namespace, "status")
            assert text.returncode == 0, text.stderr
            assert "report:cli  [lock]  held 1/1  waiting 1" in text.stdout
            assert first.id in text.stdout and f"waiting #1: task {second.id}" in text.stdout

            released = celery_cli(redis_url, namespace, "release", "report:cli", "-f", "--json")
            assert released.returncode == 0, released.stderr
            assert [r["token"] for r in json.loads(released.stdout)["released"]] == [
                holder["token"]
            ]
            # The waiting task is handed the lock and runs; the first task's
            # heartbeat reports its lease lost (the lock_lost signal).
            wait_for(
                lambda: any(r["task_id"] == second.id for r in recorder.runs()),
                timeout=60,
                message="the second report to run",
            )
            (run,) = [r for r in recorder.runs() if r["task_id"] == second.id]
            assert run["token"] > holder["token"]
            wait_for(
                lambda: [x["name"] for x in recorder.listed("lost")] == ["report:cli"],
                timeout=30,
                message="lock_lost from the first task",
            )
            stop_group(worker, grace=0.1)  # the first task would run for a minute
    finally:
        recorder.clear()
        recorder.drop_queue()
        recorder.client.close()
        sender.close()


# -- every user mistake: one line, exit status 2 (1: unreachable), never a traceback -------------


def celery_redislock(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m celery <args>`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "celery", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line_error(
    out: subprocess.CompletedProcess[str], status: int, *expected: str, secret: str = "hunter2"
) -> str:
    """The single line ``out`` printed, after checking status, traceback and password."""
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == status, out.stderr
    assert "Traceback" not in out.stderr and secret not in out.stderr + out.stdout
    assert len(lines) == 1, out.stderr
    assert out.stdout == ""
    (line,) = lines
    assert line.startswith("Error: ") and len(line) < 400, line
    for part in expected:
        assert part in line, line
    return line


@pytest.fixture(scope="module")
def sentinel_group() -> Iterator[SentinelGroup]:
    """A Sentinel group whose primary needs a password (``hunter2``)."""
    with SentinelGroup() as group:
        for server in group.servers:
            with redis.Redis(port=server.port, socket_timeout=10) as direct:
                direct.config_set("masterauth", "hunter2")
                direct.config_set("requirepass", "hunter2")
        for sentinel in group.sentinels:
            with redis.Redis(port=sentinel.port, socket_timeout=10) as direct:
                direct.execute_command("SENTINEL", "SET", group.master_name, "auth-pass", "hunter2")
        yield group


def sentinel_list(group: SentinelGroup, password: str = "") -> str:
    auth = f":{password}@" if password else ""
    return ";".join(f"sentinel://{auth}127.0.0.1:{s.port}" for s in group.sentinels) + "/0"


def test_sentinel_urls_with_master_name_and_password(
    sentinel_group: SentinelGroup, prefix: str
) -> None:
    group = sentinel_group
    client = client_from_url(sentinel_list(group, "hunter2"), group.options)
    lock = RedisLock(client, "via-sentinel", prefix=prefix)
    assert lock.acquire()
    try:
        url = sentinel_list(group, "hunter2")
        # --url before and after the sub-command, with --master-name
        for args in (
            ["redislock", "--url", url, "--master-name", group.master_name, "status"],
            ["redislock", "status", "--url", url, "--master-name", group.master_name],
            ["redislock", "--url", url, "status", "--master-name", group.master_name],
        ):
            out = celery_redislock(*args, "--prefix", prefix)
            assert out.returncode == 0, out.stderr
            assert "via-sentinel  [unknown]  held 1" in out.stdout
            assert "hunter2" not in out.stdout and "sentinel://:***@127.0.0.1" in out.stdout
        # The app's redislock_url is a Sentinel list with a password; master_name from
        # its broker_transport_options (redaction used to crash on the list).
        env = {"CLI_URLS_LOCK_URL": url, "CLI_URLS_MASTER": group.master_name}
        out = celery_redislock(
            "-A", "tests.celery_apps.cli_urls", "redislock", "status", "--prefix", prefix, **env
        )
        assert out.returncode == 0, out.stderr
        assert "via-sentinel" in out.stdout and "hunter2" not in out.stdout
        # --url with the app: the app's master_name still applies.
        out = celery_redislock(
            "-A",
            "tests.celery_apps.cli_urls",
            "redislock",
            "status",
            "--url",
            url,
            "--prefix",
            prefix,
            **env,
        )
        assert out.returncode == 0, out.stderr
    finally:
        lock.release()
        client.close()

    no_master = celery_redislock("redislock", "status", "--url", url)
    one_line_error(no_master, 2, "needs the option master_name", "--master-name")
    wrong = celery_redislock("redislock", "status", "--url", url, "--master-name", "nope")
    one_line_error(wrong, 2, "know no master named 'nope'", "sentinel://:***@127.0.0.1")
    bad_password = sentinel_list(group, "wrong-pw")
    refused = celery_redislock(
        "redislock", "status", "--url", bad_password, "--master-name", group.master_name
    )
    one_line_error(refused, 2, "refused the credentials", secret="wrong-pw")


def test_user_mistakes_are_one_line_with_the_right_status(own_redis: RedisServer) -> None:
    closed = free_port()
    cases: list[tuple[list[str], int, tuple[str, ...]]] = [
        # unreachable: status 1
        (
            ["--url", f"redis://user:hunter2@127.0.0.1:{closed}/0"],
            1,
            (f"cannot reach Redis at redis://user:***@127.0.0.1:{closed}/0 (option --url)",),
        ),
        (
            ["--url", f"redis+cluster://127.0.0.1:{closed}"],
            1,
            (f"cannot reach the Redis Cluster at redis+cluster://127.0.0.1:{closed}",),
        ),
        (
            [
                "--url",
                f"sentinel://:hunter2@127.0.0.1:{closed};sentinel://127.0.0.1:{closed}/0",
                "--master-name",
                "m",
            ],
            1,
            (f"cannot reach any Sentinel at sentinel://:***@127.0.0.1:{closed};",),
        ),
        # mistakes: status 2
        (
            ["--url", "redis://127.0.0.1:notaport/0"],
            2,
            ("bad port in 'redis://127.0.0.1:notaport/0'",),
        ),
        (
            ["--url", "redis://:hunter2@127.0.0.1:notaport/0"],
            2,
            ("bad port in 'redis://:***@127.0.0.1:notaport/0'",),
        ),
        (
            ["--url", f"redis+cluster://127.0.0.1:{own_redis.port}"],
            2,
            ("is a cluster URL, but the Redis there is not a cluster",),
        ),
        (
            ["--url", f"redis://127.0.0.1:{own_redis.port}", "--master-name", "m"],
            2,
            ("master_name are for sentinel:// URLs",),
        ),
        (["--url", "amqp://guest@localhost//"], 2, ("unsupported Redis URL scheme 'amqp'",)),
        (
            ["--url", f"redis://127.0.0.1:{own_redis.port}", "--bogus"],
            2,
            ("No such option '--bogus'",),
        ),
        (["--url", f"redis://127.0.0.1:{own_redis.port}", "--waiters", "-1"], 2, ("--waiters",)),
    ]
    for args, status, expected in cases:
        out = celery_redislock("redislock", "status", *args)
        one_line_error(out, status, *expected)
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    one_line_error(celery_redislock("redislock", "--url", url, "stauts"), 2, "No such command")
    one_line_error(
        celery_redislock("redislock", "--url", url, "status", "--url", "redis://other:1"),
        2,
        "--url given twice",
    )
    one_line_error(
        celery_redislock("redislock", "release", "a{b", "-f", "--url", url), 2, "bad NAME 'a{b'"
    )
    one_line_error(
        celery_redislock("redislock", "release", "nothing-here", "-f", "--url", url),
        2,
        "unknown key: nothing holds 'nothing-here'",
    )
    one_line_error(
        celery_redislock("redislock", "status"), 2, "no Celery app given", "before or after"
    )


# -- status --top [--watch]: the busiest keys --------------------------------------------------


def top_table(output: str) -> list[list[str]]:
    """The rows of a ``status --top`` text frame, split into columns (heading left out)."""
    lines = output.strip().splitlines()
    assert lines[1].split() == [
        "KEY",
        "KIND",
        "HELD",
        "RESERVED",
        "WAITING",
        "PARKED",
        "OLDEST",
        "PAUSED",
        "NEXT",
        "DUE",
    ], output
    return [line.split() for line in lines[2:]]


def test_status_top_ranks_the_busiest_keys(
    app_module: str, redis_client: redis.Redis, prefix: str, spawn: Callable[..., Holder]
) -> None:
    """Busiest = (parked, held + reserved, waiting, oldest parked age), each
    descending: real holders, a FIFO waiter in another process, and parks."""
    busy = [FairSemaphore(redis_client, "sem:busy", 3, ttl=30, prefix=prefix) for _ in range(3)]
    calm = FairSemaphore(redis_client, "sem:calm", 1, ttl=30, prefix=prefix)
    quiet = FairSemaphore(redis_client, "sem:quiet", 2, ttl=30, prefix=prefix)
    for sem in [*busy, calm, quiet]:
        assert sem.acquire(blocking=False)
    waiter = spawn("sem:calm", slots=1, task_id="w-1")
    config = ParkConfig(deadline=60)
    older = Parking(redis_client, prefix, "api:acme")  # a semaphore of one slot
    assert older.enqueue("a1", ONE_SLOT, "{}", 0, config, "proj.call").verdict is Verdict.RESERVED
    for i, parked in [(2, 1), (3, 2)]:
        assert older.enqueue(f"a{i}", ONE_SLOT, "{}", 0, config, "proj.call").count == parked
    RateLimiter(redis_client, "api:acme", prefix=prefix).pause(600)
    wait_for(lambda: (older.status().oldest_age or 0) >= 0.2, message="api:acme to age")
    newer = Parking(redis_client, prefix, "api:later")  # a lock (limit passed fixed)
    assert newer.enqueue("b1", LOCK, "{}", 0, config, "proj.lock").verdict is Verdict.RESERVED
    for i, parked in [(2, 1), (3, 2)]:
        assert newer.enqueue(f"b{i}", LOCK, "{}", 0, config, "proj.lock").count == parked

    def waiting() -> dict[str, Any] | None:
        out = run("-A", app_module, "redislock", "status", "--top", "9", "--json")
        data: dict[str, Any] = json.loads(out.stdout)
        rows = {r["name"]: r for r in data["top"]}
        return data if rows.get("sem:calm", {}).get("waiting") == 1 else None

    data = wait_for(waiting, timeout=30, message="the sem:calm process to queue")
    assert data is not None
    assert set(data) == {"url", "prefix", "top"} and data["prefix"] == prefix
    assert [r["name"] for r in data["top"]] == [
        "api:acme",
        "api:later",
        "sem:busy",
        "sem:calm",
        "sem:quiet",
    ]
    acme, later, sem_busy, sem_calm, sem_quiet = data["top"]
    assert {k: acme[k] for k in ("kind", "held", "reserved", "limit", "waiting", "parked")} == {
        "kind": "semaphore",
        "held": 0,
        "reserved": 1,
        "limit": 1,
        "waiting": 0,
        "parked": 2,
    }
    assert acme["oldest_parked_age"] > later["oldest_parked_age"] >= 0
    assert 500 < acme["paused_for"] <= 600 and 500 < acme["next_due_in"] <= 600
    assert (later["kind"], later["limit"], later["reserved"], later["paused_for"]) == (
        "lock",
        1,
        1,
        0.0,
    )
    assert (sem_busy["held"], sem_busy["limit"], sem_busy["parked"]) == (3, 3, 0)
    assert sem_busy["oldest_parked_age"] is None and sem_busy["next_due_in"] == 0
    assert (sem_calm["held"], sem_calm["limit"], sem_calm["waiting"]) == (1, 1, 1)
    assert (sem_quiet["held"], sem_quiet["limit"], sem_quiet["waiting"]) == (1, 2, 0)

    text = run("-A", app_module, "redislock", "status", "--top", "2")
    assert text.exit_code == 0, text.output
    heading = text.stdout.splitlines()[0]
    assert heading.startswith(f"top 2 of 5 busy key(s) under prefix '{prefix}' on redis://")
    assert "busiest first by (parked, held+reserved, waiting, oldest parked age)" in heading
    first, second = top_table(text.stdout)
    assert first[:6] == ["api:acme", "semaphore", "0/1", "1", "0", "2"]
    assert first[6].endswith("s") and 500 < float(first[7].removesuffix("s")) <= 600
    assert 500 < float(first[8].removesuffix("s")) <= 600
    assert second == ["api:later", "lock", "0/1", "1", "0", "2", second[6], "-", "-"]

    # --match narrows the keys before ranking; an override's limit is shown.
    Overrides(redis_client, "sem:quiet", prefix).set(limit=5)
    sems = run("-A", app_module, "redislock", "status", "--top", "3", "--match", "sem:*")
    assert sems.exit_code == 0, sems.output
    assert top_table(sems.stdout) == [
        ["sem:busy", "semaphore", "3/3", "0", "0", "0", "-", "-", "-"],
        ["sem:calm", "semaphore", "1/1", "0", "1", "0", "-", "-", "-"],
        ["sem:quiet", "semaphore", "1/5", "0", "0", "0", "-", "-", "-"],
    ]
    calm.release()
    waiter.wait_held()
    assert waiter.finish() == ["released"]
    for sem in [*busy, quiet]:
        sem.release()
    for name in ("api:acme", "api:later"):
        discard(redis_client, prefix, name)
    empty = run("-A", app_module, "redislock", "status", "--top", "2", "--match", "sem:*")
    assert empty.stdout.startswith("nothing held, waiting or parked under prefix")


def test_status_top_bad_values_are_one_line_with_status_2(app_module: str) -> None:
    for args, expected in [
        (["--top", "0"], "Invalid value for '--top': 0 is not in the range x>=1"),
        (["--top", "two"], "Invalid value for '--top'"),
        (["--top", "3", "--watch", "0"], "Invalid value for '--watch': 0.0 is not in the range"),
        (["--top", "3", "--watch", "soon"], "Invalid value for '--watch'"),
        (["--top", "3", "--watch", "nan"], "'nan' is not a finite number of seconds"),
        (["--top", "3", "--watch", "inf"], "inf is not in the range 0<x<=100000000"),
        (["--watch", "1"], "--watch goes with --top N"),
    ]:
        result = run("-A", app_module, "redislock", "status", *args)
        assert result.exit_code == 2, result.output
        assert expected in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1, result.output


def test_odd_numbers_and_options_are_one_line_with_status_2(app_module: str) -> None:
    """Seconds that are not finite, an explicit empty ``--prefix`` (not the
    app's prefix in disguise) and the web view's own options are mistakes
    like any other: one line, status 2, never a traceback."""
    for args, expected in [
        (["pause", "api:acme", "inf"], "inf is not in the range 0<x<=100000000"),
        (["pause", "api:acme", "1e20"], "is not in the range 0<x<=100000000"),
        (["pause", "api:acme", "nan"], "'nan' is not a finite number of seconds"),
        (["--prefix", "", "status"], "key prefix must be non-empty"),
        (["web", "--port", "70000"], "Invalid value for '--port'"),
        (["web", "--bogus"], "No such option '--bogus'"),
    ]:
        result = run("-A", app_module, "redislock", *args)
        assert result.exit_code == 2, (args, result.output)
        assert expected in result.output and "Traceback" not in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_rate_override_in_any_notation_keeps_every_command_working(
    app_module: str, redis_client: Any, prefix: str
) -> None:
    """``limit set --rate 1000000/h`` (278/s) is stored, and ``limit show``,
    ``status --top`` and ``limit clear --only limit`` go on working while it
    is in force (its text once read back as ``1e+06/h``, which broke them)."""
    held = FairSemaphore(redis_client, "account:42", 3, ttl=60, prefix=prefix)
    assert held.acquire(blocking=False)
    try:
        for args in [
            ["limit", "set", "account:42", "--rate", "1000000/h"],
            ["limit", "show"],
            ["status", "--top", "5"],
            ["limit", "clear", "account:42", "--only", "limit"],
            ["limit", "show"],
        ]:
            result = run("-A", app_module, "redislock", *args)
            assert result.exit_code == 0, (args, result.output)
        assert "1000000/h" in result.output
    finally:
        run("-A", app_module, "redislock", "limit", "clear", "account:42")
        held.release()


def test_watch_redraws_in_place_on_a_terminal_and_stops_quietly_on_ctrl_c() -> None:
    for clear, expected in [(True, f"{CLEAR}one\n{CLEAR}two\n"), (False, "one\n\ntwo\n")]:
        frames = iter(["one", "two", "three"])
        naps: list[float] = []

        def nap(seconds: float, naps: list[float] = naps) -> None:
            naps.append(seconds)
            if len(naps) == 2:
                raise KeyboardInterrupt  # Ctrl-C during the second wait

        out = io.StringIO()
        watch(frames.__next__, 0.5, out, clear=clear, sleep=nap)
        assert out.getvalue() == expected and naps == [0.5, 0.5]


def test_status_top_watch_in_a_real_celery_process_until_sigint(
    redis_url: str, prefix: str, redis_client: redis.Redis
) -> None:
    """Frames separated by a blank line (stdout is a pipe), each read afresh
    from Redis; SIGINT ends it with status 0 and no traceback."""
    lock = RedisLock(redis_client, "watched", ttl=30, prefix=prefix)
    assert lock.acquire()
    env = {**os.environ, "CLI_APP_REDIS_URL": redis_url, "CLI_APP_PREFIX": prefix}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.cli_app",
            "redislock",
            "status",
            "--top",
            "3",
            "--watch",
            "0.2",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    lines: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")))
    reader.start()  # extend() of a list is atomic: the test reads `lines` as it grows

    def frames() -> list[str]:
        return "".join(list(lines)).split("\n\n")

    try:
        wait_for(
            lambda: any("\nwatched  lock  1/1" in f for f in frames()[:-1]),
            timeout=60,
            message="a whole frame with the held lock",
        )
        lock.release()
        wait_for(
            lambda: any("nothing held, waiting or parked" in f for f in frames()),
            timeout=30,
            message="a frame drawn after the release",
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        reader.join(timeout=10)
        errors = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    assert "Traceback" not in errors and "Aborted" not in errors, errors
    shown = frames()
    assert len(shown) >= 2
    assert all(f.split("  ", 1)[0].count(":") == 2 for f in shown if f.strip())  # a time stamp
    assert all("every 0.2s, Ctrl-C to stop" in f for f in shown if f.strip())


def test_status_shows_a_debounced_keys_pending_run_and_when_it_is_due(
    app_module: str, redis_client: redis.Redis, prefix: str
) -> None:
    """A debounced call (``lock_debounce``) waits in the park even on a free key:
    ``status --top`` lists its pending run with the time left until it is due,
    and ``parked --list`` names the task."""
    config = ParkConfig(keep_latest=True, debounce=60)
    park = Parking(redis_client, prefix, "index:doc7")
    assert (
        park.enqueue("d1", LOCK, '{"task": "proj.reindex"}', 0, config, "proj.reindex").count == 1
    )
    replaced = park.enqueue("d2", LOCK, '{"task": "proj.reindex"}', 0, config, "proj.reindex")
    assert replaced.replaced == ("d1",)
    out = run("-A", app_module, "redislock", "status", "--top", "5", "--json")
    row = next(r for r in json.loads(out.stdout)["top"] if r["name"] == "index:doc7")
    assert row["parked"] == 1 and 50 < row["next_due_in"] <= 60
    listed = run("-A", app_module, "redislock", "parked", "--list", "5")
    assert "index:doc7" in listed.output and "d2" in listed.output and "d1" not in listed.output
