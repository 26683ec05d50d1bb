"""The lock Redis checked once at worker start, and one ERROR line per task that fails closed.

Real ``celery worker`` processes (tests/celery_harness.py, app
tests/celery_apps/basic.py); the broker and result backend are the test
Redis, the lock Redis is whatever the test points ``redislock_url`` at.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from celery_redislock.core.acl import CLIENT_COMMANDS, SCRIPT_COMMANDS
from celery_redislock.testing.servers import RedisServer, free_port
from tests.celery_apps.basic import create_app
from tests.celery_harness import celery_worker_factory  # noqa: F401 (fixture)
from tests.waiting import wait_for

SECRET = "hunter2"


def make_config(redis_url: str, lock_redis: str) -> dict[str, str]:
    return {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", "lock_redis": lock_redis}


def log_lines(path: Path, level: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if f"{level}/" in line]


def test_unreachable_lock_redis_warns_at_start_and_each_task_logs_one_error_line(
    redis_url: str,
    celery_worker_factory: Any,  # noqa: F811
) -> None:
    port = free_port()
    shown = f"redis://:***@127.0.0.1:{port}/0"
    config = make_config(redis_url, f"redis://:{SECRET}@127.0.0.1:{port}/0")
    worker = celery_worker_factory(config, concurrency=1)

    def start_warning() -> list[str]:
        return [w for w in log_lines(worker.log_path, "WARNING") if "celery-redislock" in w]

    (warning,) = wait_for(start_warning, 60, message="the start-up warning")
    assert f"cannot reach Redis at {shown} (setting redislock_url)" in warning
    assert "fail closed" in warning

    app = create_app(config)
    result = app.send_task("basic.sleeper", ("x", 0.1))
    wait_for(lambda: result.state == "FAILURE", 60, message="FAILURE")
    assert type(result.result).__name__ == "ConnectionError"  # the error keeps its type
    log = worker.log_path.read_text()
    (error,) = log_lines(worker.log_path, "ERROR")
    assert f"basic.sleeper[{result.id}] not run, lock 'sleep:x'" in error
    assert f"cannot reach Redis at {shown} (setting redislock_url)" in error
    assert "Traceback" not in log and SECRET not in log
    # Celery's own report of the failure is one line at INFO (logged by the
    # main process once the child reports: it may follow the state by a moment).
    reported = rf"INFO/.*Task basic.sleeper\[{result.id}\] raised expected"
    wait_for(lambda: re.search(reported, worker.log_path.read_text()), 30, message="INFO line")


def test_lock_redis_without_the_acl_permissions_warns_at_start(
    redis_url: str,
    celery_worker_factory: Any,  # noqa: F811
    own_redis: RedisServer,
) -> None:
    config = make_config(redis_url, "")
    prefix = config["prefix"]
    missing = "zadd"
    rules = [f"+{c}" for c in (*CLIENT_COMMANDS, *SCRIPT_COMMANDS) if c != missing]
    with redis.Redis(port=own_redis.port, socket_timeout=10) as admin:
        admin.acl_setuser(
            "locks",
            enabled=True,
            passwords=[f"+{SECRET}"],
            keys=[f"{prefix}:*"],
            commands=["-@all", *rules],
        )
    config["lock_redis"] = f"redis://locks:{SECRET}@127.0.0.1:{own_redis.port}/0"
    worker = celery_worker_factory(config, concurrency=1)

    def start_warning() -> list[str]:
        return [w for w in log_lines(worker.log_path, "WARNING") if "celery-redislock" in w]

    (warning,) = wait_for(start_warning, 60, message="the start-up warning")
    assert f"redis://locks:***@127.0.0.1:{own_redis.port}/0 (setting redislock_url)" in warning
    assert "ZADD" in warning and "+zadd" in warning
    assert SECRET not in worker.log_path.read_text()


def test_a_healthy_lock_redis_gives_no_warning(
    redis_url: str,
    celery_worker_factory: Any,  # noqa: F811
) -> None:
    config = make_config(redis_url, redis_url)
    worker = celery_worker_factory(config, concurrency=1)
    wait_for(
        lambda: "lock Redis at" in worker.log_path.read_text(), 60, message="the start-up check"
    )
    assert not [w for w in log_lines(worker.log_path, "WARNING") if "celery-redislock" in w]
    assert "(setting redislock_url) reachable" in worker.log_path.read_text()


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("lock_redis", "redis://127.0.0.1:xx/0", "bad port"),  # no client takes the URL
        ("ttl", "-1", "redislock_default_ttl must be a positive number"),  # settings refused
    ],
)
def test_unusable_settings_warn_once_at_start_and_each_task_logs_one_error_line(
    redis_url: str,
    celery_worker_factory: Any,  # noqa: F811
    setting: str,
    value: str,
    said: str,
) -> None:
    config = {**make_config(redis_url, redis_url), setting: value}
    worker = celery_worker_factory(config, concurrency=1)

    def start_warning() -> list[str]:
        return [w for w in log_lines(worker.log_path, "WARNING") if "celery-redislock" in w]

    (warning,) = wait_for(start_warning, 60, message="the start-up warning")
    assert said in warning and "fail closed" in warning

    app = create_app({**config, "ttl": "30"})  # the caller's own settings are fine
    result = app.send_task("basic.sleeper", ("x", 0.1))
    wait_for(lambda: result.state == "FAILURE", 60, message="FAILURE")
    assert type(result.result).__name__ == "ValueError"
    reported = rf"INFO/.*Task basic.sleeper\[{result.id}\] raised expected"
    wait_for(lambda: re.search(reported, worker.log_path.read_text()), 30, message="INFO line")
    (error,) = log_lines(worker.log_path, "ERROR")
    assert f"basic.sleeper[{result.id}] not run, lock 'sleep:x': settings (fail closed)" in error
    assert said in error
    log = worker.log_path.read_text()
    assert "Traceback" not in log and "Signal handler" not in log
    assert len(start_warning()) == 1


def test_an_unreachable_cluster_warns_at_start_and_each_task_fails_closed_in_one_line(
    redis_url: str,
    celery_worker_factory: Any,  # noqa: F811
) -> None:
    """A Cluster client connects when it is built: at start (the check, the
    sweeper) and in the task (before its first script call)."""
    port = free_port()
    config = make_config(redis_url, f"redis+cluster://127.0.0.1:{port}/0")
    worker = celery_worker_factory(config, concurrency=1)

    def start_warning() -> list[str]:
        return [w for w in log_lines(worker.log_path, "WARNING") if "celery-redislock" in w]

    (warning,) = wait_for(start_warning, 60, message="the start-up warning")
    assert "Cluster" in warning and "fail closed" in warning
    app = create_app(config)
    result = app.send_task("basic.sleeper", ("x", 0.1))
    wait_for(lambda: result.state == "FAILURE", 60, message="FAILURE")
    reported = rf"INFO/.*Task basic.sleeper\[{result.id}\] raised expected"
    wait_for(lambda: re.search(reported, worker.log_path.read_text()), 30, message="INFO line")
    (error,) = log_lines(worker.log_path, "ERROR")
    assert f"basic.sleeper[{result.id}] not run, lock 'sleep:x': Redis unreachable" in error
    log = worker.log_path.read_text()
    assert "Traceback" not in log and "Signal handler" not in log
