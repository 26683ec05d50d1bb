"""A new user's first hour, from the README as written: the minimal app on a
real worker shows the skip it promises, and the Django form of the settings
(``config_from_object(..., namespace="CELERY")`` with ``shared_task``) puts
the locks where it says.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import types
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from celery import Celery, shared_task

from celery_redislock import LockedTask
from celery_redislock.testing.servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def readme_section(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(heading)
    return text[start : text.index("\n## ", start + len(heading))]


def fenced(section: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", section, re.S | re.M)


def test_the_minimal_app_skips_the_second_call_as_the_readme_says(tmp_path: Path) -> None:
    section = readme_section("## Install and a minimal app")
    [app_code] = fenced(section, "python")
    [send_code] = fenced(section, "py")
    worker_line, send_line = fenced(section, "sh")[1].strip().splitlines()
    assert "It prints `['SKIPPED', 'SUCCESS']`" in section  # what the text promises
    (tmp_path / "tasks.py").write_text(app_code)
    (tmp_path / "send.py").write_text(send_code)
    with RedisServer() as server:  # a Redis of its own: the app uses the default queue
        env = {**os.environ, "REDIS_URL": server.url, "PYTHONPATH": str(tmp_path)}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
        log = (tmp_path / "worker.log").open("w")
        worker = subprocess.Popen(
            ["bash", "-c", f"exec {worker_line}"],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            sent = subprocess.run(
                ["bash", "-c", send_line],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(60)
            log.close()
        worker_log = (tmp_path / "worker.log").read_text()
        assert sent.returncode == 0, sent.stderr + worker_log
        assert sent.stdout.strip() == "['SKIPPED', 'SUCCESS']", sent.stdout + worker_log
        assert "skipped: lock 'report:42' is held (policy skip)" in worker_log


def _with_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


def test_django_settings_with_the_celery_namespace_reach_the_library(
    redis_url: str, prefix: str
) -> None:
    # The README's settings.py, as Django would load it, pointed at the test Redis.
    [settings_code] = [
        code
        for code in fenced(readme_section("## Production settings"), "py")
        if code.startswith("# proj/settings.py")
    ]
    settings = types.SimpleNamespace()
    exec(settings_code, vars(settings))  # plain assignments
    lock_url = _with_db(redis_url, 1 + int(urlsplit(redis_url).path.strip("/") or 0))
    settings.CELERY_BROKER_URL = settings.CELERY_RESULT_BACKEND = redis_url
    settings.CELERY_REDISLOCK_URL = lock_url
    settings.CELERY_REDISLOCK_PREFIX = prefix
    app = Celery(f"proj-{uuid.uuid4().hex[:6]}", set_as_current=False)
    app.config_from_object(settings, namespace="CELERY")
    assert app.conf.task_acks_late is True
    assert app.conf.get("redislock_default_ttl") == settings.CELERY_REDISLOCK_DEFAULT_TTL
    seen: dict[str, Any] = {}

    @shared_task(bind=True, base=LockedTask, lock_key="report:{account_id}")
    def generate_report(self: Any, account_id: int) -> int:
        lock_db = redis.Redis.from_url(lock_url)
        seen["keys"] = sorted(k.decode() for k in lock_db.scan_iter(match=f"{prefix}:*"))
        seen["ttl"] = self.request.redislock.ttl
        return account_id

    app.finalize()
    task = app.tasks[generate_report.name]
    assert task.apply((42,)).get() == 42
    assert f"{prefix}:{{report:42}}:fence" in seen["keys"], seen  # in the lock database
    assert seen["ttl"] == settings.CELERY_REDISLOCK_DEFAULT_TTL
    broker_db = redis.Redis.from_url(redis_url)
    assert not list(broker_db.scan_iter(match=f"{prefix}:*"))
