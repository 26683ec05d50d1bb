"""Every way a guarded task can end, against one real prefork worker.

The worker (concurrency 4) is shared by the module; tests keep apart by
using different key values.  Assertions read the records the task bodies
wrote and the lock state in Redis afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.result import AsyncResult

from celery_redislock import SKIPPED
from tests.celery_apps.basic import create_app
from tests.celery_harness import WorkerProcess, worker_factory
from tests.waiting import wait_for

TTL = 30.0


@pytest.fixture(scope="module")
def config(redis_url: str) -> dict[str, str]:
    return {"redis": redis_url, "prefix": f"t-{uuid.uuid4().hex[:12]}", "ttl": str(TTL)}


@pytest.fixture(scope="module")
def app(config: dict[str, str]) -> Any:
    return create_app(config)


@pytest.fixture(scope="module")
def worker(config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with worker_factory(tmp_path_factory.mktemp("lifecycle")) as start:
        yield start(config, pool="prefork", concurrency=4)


@pytest.fixture
def key() -> str:
    return uuid.uuid4().hex[:10]


def holders(app: Any, task_name: str, *args: Any) -> list[Any]:
    task = app.tasks[task_name]
    return task.redislock_leaseset(task.redislock_name(args, {})).holders()


def result_of(app: Any, result: AsyncResult, timeout: float = 60.0) -> AsyncResult:
    wait_for(lambda: result.state not in ("PENDING", "STARTED", "RETRY"), timeout,
             message=f"task {result.id} to end (state {result.state})")  # fmt: skip
    return result


def test_success_runs_under_the_lock_and_releases(
    app: Any, worker: WorkerProcess, key: str
) -> None:
    result = app.tasks["basic.sleeper"].delay(key, 0.2)
    value = result.get(timeout=60)
    events = app.recorder.events("sleeper", key)
    assert [e["what"] for e in events] == ["start", "end"]
    assert events[0]["token"] == value["token"] and events[1]["owned"] is True
    assert value["name"] == f"sleep:{key}"
    assert holders(app, "basic.sleeper", key) == []


def test_duplicate_is_skipped_with_state_and_log(app: Any, worker: WorkerProcess, key: str) -> None:
    sleeper = app.tasks["basic.sleeper"]
    first = sleeper.delay(key, 3.0)
    wait_for(lambda: app.recorder.events("sleeper", key), 60, message="first to start")
    second = sleeper.delay(key, 0.1)
    wait_for(lambda: second.state == SKIPPED, 60, message="second to be SKIPPED")
    assert second.info == {"lock": f"sleep:{key}", "kind": "lock", "policy": "skip"}
    first.get(timeout=60)
    assert [e["id"] for e in app.recorder.events("sleeper", key) if e["what"] == "start"] == [
        first.id
    ]
    assert "skipped: lock 'sleep:" in Path(worker.log_path).read_text()
    assert holders(app, "basic.sleeper", key) == []
