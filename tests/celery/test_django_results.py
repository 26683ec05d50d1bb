"""The ``django-db`` result backend (django-celery-results) on PostgreSQL, as a
Django project sets it up: the states the library writes from the worker's
main process (the park sweeper) survive the database dropping that
process's connection (a restart, a failover, an idle timeout).

Needs a PostgreSQL server that takes ``CREATE DATABASE`` from its URL
(``REDISLOCK_TEST_POSTGRES_URL``, else ``postgresql://postgres@127.0.0.1:5432/postgres``)
and django-celery-results with psycopg (the ``[test]`` extra); skips, saying
so, without them, unless ``REDISLOCK_REQUIRE_POSTGRES`` is set (CI).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import wait_for

from .test_configuration import run, user_env, worker

POSTGRES_URL = os.environ.get(
    "REDISLOCK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)

SETTINGS = """
SECRET_KEY = "not-a-secret"
INSTALLED_APPS = ["django_celery_results"]
USE_TZ = True
DATABASES = {{"default": {{
    "ENGINE": "django.db.backends.postgresql",
    "NAME": {database!r}, "USER": {user!r}, "PASSWORD": {password!r},
    "HOST": {host!r}, "PORT": {port!r},
}}}}
CELERY_BROKER_URL = {broker!r}
CELERY_RESULT_BACKEND = "django-db"
CELERY_TASK_DEFAULT_QUEUE = {queue!r}
CELERY_REDISLOCK_PREFIX = {queue!r}
CELERY_REDISLOCK_PARK_DEADLINE = 1
CELERY_REDISLOCK_PARK_MAX_PUBLISHES = 2
CELERY_REDISLOCK_PARK_SWEEP_INTERVAL = 0.5
"""

CELERY = """
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproj.settings")
app = Celery("djproj", include=["djproj.tasks"])
app.config_from_object("django.conf:settings", namespace="CELERY")
"""

TASKS = """
from celery import shared_task

from celery_redislock import SemaphoreTask


@shared_task(base=SemaphoreTask, semaphore_key="slots:{n}", semaphore_limit=1)
def slots(n):
    return n
"""

# A call routed to a queue no worker consumes: reserved at the call, then the
# sweeper of the worker publishes it again (PROMOTED) and gives it up
# (FAILURE, ParkUnclaimed), both written from the worker's main process.
CALL = """
import django

django.setup()

from djproj.tasks import slots

print(slots.apply_async((int(__import__("sys").argv[1]),), queue="nobody-consumes-this").id)
"""


def _connect(url: str) -> Any:
    psycopg = pytest.importorskip("psycopg", reason="pip install 'psycopg[binary]' ([test] extra)")
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL not reachable at {url} ({exc})".replace("\n", " ")
        if os.environ.get("REDISLOCK_REQUIRE_POSTGRES"):  # CI, where PostgreSQL listens
            pytest.fail(message + " (REDISLOCK_REQUIRE_POSTGRES is set)")
        pytest.skip(message + ": apt-get install postgresql, or set REDISLOCK_TEST_POSTGRES_URL")


@pytest.fixture
def database() -> Iterator[tuple[Any, str]]:
    """A database of its own on the PostgreSQL server: (an admin connection, its name)."""
    pytest.importorskip("django_celery_results", reason="pip install django-celery-results")
    admin = _connect(POSTGRES_URL)
    name = f"redislock_{uuid.uuid4().hex[:10]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin, name
    finally:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (name,),
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.close()


def _status(admin: Any, database: str, task_id: str) -> str | None:
    import psycopg

    url = admin.info.dsn.replace(f"dbname={admin.info.dbname}", f"dbname={database}")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT status FROM django_celery_results_taskresult WHERE task_id = %s", (task_id,)
        ).fetchone()
    return None if row is None else str(row[0])


def test_the_sweeper_s_states_survive_the_database_dropping_its_connection(
    tmp_path: Path, redis_url: str, prefix: str, database: tuple[Any, str]
) -> None:
    """A parked call no worker claims ends ``FAILURE`` (``ParkUnclaimed``),
    written by the park sweeper in the worker's main process; after
    PostgreSQL ended every connection of the worker, the next such call
    still ends ``FAILURE`` in the database (the sweeper's broken connection
    is replaced), not ``PENDING`` for ever."""
    admin, name = database
    info = admin.info
    package = tmp_path / "djproj"
    package.mkdir()
    (package / "__init__.py").write_text("from .celery import app\n")
    (package / "settings.py").write_text(
        SETTINGS.format(
            database=name,
            user=info.user,
            password=info.password or "",
            host=info.host,
            port=str(info.port),
            broker=redis_url,
            queue=prefix,
        )
    )
    (package / "celery.py").write_text(CELERY)
    (package / "tasks.py").write_text(TASKS)
    env = user_env(tmp_path, DJANGO_SETTINGS_MODULE="djproj.settings")
    run(tmp_path, env, sys.executable, "-m", "django", "migrate", "-v", "0")

    def given_up(task_id: str) -> bool:
        return _status(admin, name, task_id) == "FAILURE"

    with worker(tmp_path, env, "-A", "djproj") as log:
        first = run(tmp_path, env, sys.executable, "-c", CALL, "1").strip()
        wait_for(lambda: given_up(first), 60, message="the first call given up by the sweeper")
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        second = run(tmp_path, env, sys.executable, "-c", CALL, "2").strip()
        wait_for(
            lambda: given_up(second) or f"of {second} not written" in log.read_text(),
            60,
            message="the second call given up by the sweeper",
        )
        text = log.read_text()
    assert given_up(second), text[-3000:]
    assert f"of {second} not written" not in text
