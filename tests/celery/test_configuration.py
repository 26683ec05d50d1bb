"""Configured the way Celery users configure it, on real workers.

Each test writes a small project into a temporary directory and starts a real
``celery worker`` the way deployments start it: the broker from the
environment only (``CELERY_BROKER_URL``, 12-factor), from ``-b``, a Django
project whose settings are loaded without a namespace, and a client factory.
It then checks that guarded tasks run, that their keys land in the Redis the
worker names, and that the worker's start line and ``redislock status`` name
that Redis.  The last tests check that ``lock_dedupe`` keeps two tasks that
share a key template apart, and that one client serves every call of a
process (no new connection per call).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from celery import Celery

from celery_redislock import LockedTask, SemaphoreTask
from celery_redislock.core.connection import redact
from celery_redislock.settings import reset, settings_from_app
from celery_redislock.worker.checks import PROBE_NAME, unread_settings
from tests.waiting import wait_for

BIN = Path(sys.executable).parent


def with_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


def db_of(url: str) -> int:
    return int(urlsplit(url).path.strip("/") or 0)


def other_db(url: str, offset: int) -> str:
    """The same server as ``url``, another database (0-15)."""
    return with_db(url, (db_of(url) + offset) % 16)


def user_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: the project on PYTHONPATH, and no
    REDIS_URL or Celery variable of the suite's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "REDIS"))}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env["PYTHONPATH"] = str(tmp_path)
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env.update(extra)
    return env


def env_configured(tmp_path: Path, redis_url: str, prefix: str, **extra: str) -> dict[str, str]:
    """A shell configured the 12-factor way: broker and results from the environment."""
    return user_env(
        tmp_path,
        CELERY_BROKER_URL=redis_url,
        CELERY_RESULT_BACKEND=redis_url,
        QUEUE=prefix,
        PREFIX=prefix,
        **extra,
    )


@contextmanager
def worker(tmp_path: Path, env: dict[str, str], *args: str) -> Iterator[Path]:
    """``celery <args> worker`` as a user starts it; yields its log once ready."""
    log = tmp_path / f"worker-{uuid.uuid4().hex[:6]}.log"
    command = ["celery", *args, "worker", "-P", "prefork", "-c", "2", "--loglevel", "INFO"]
    with log.open("w") as out:
        proc = subprocess.Popen(
            command,
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: "ready." in log.read_text() or proc.poll() is not None,
                60,
                0.1,
                "the worker to be ready",
            )
            assert proc.poll() is None, log.read_text()
            yield log
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def run(tmp_path: Path, env: dict[str, str], *command: str) -> str:
    done = subprocess.run(
        list(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


SEND = """
import sys, time
from {module} import {tasks}
calls = [task.delay(*args) for task, args in [{calls}]]
deadline = time.monotonic() + 60
while any(c.state == "PENDING" for c in calls) and time.monotonic() < deadline:
    time.sleep(0.1)
print(" ".join(c.state for c in calls))
"""


def send(tmp_path: Path, env: dict[str, str], module: str, calls: str, tasks: str) -> list[str]:
    """Call tasks from a user's process; the final state of each call."""
    code = SEND.format(module=module, tasks=tasks, calls=calls)
    return run(tmp_path, env, sys.executable, "-c", code).split()


def fence_keys(url: str, prefix: str) -> list[str]:
    """The fence counters of ``prefix`` at ``url``: the names locked there
    (but the worker's start-up probe)."""
    client = redis.Redis.from_url(url)
    probe = f"{prefix}:{{{PROBE_NAME}}}:fence"
    try:
        keys = (k.decode() for k in client.scan_iter(match=f"{prefix}:*:fence"))
        return sorted(k for k in keys if k != probe)
    finally:
        client.close()


ENV_APP = """
import os
from celery import Celery
from celery_redislock import LockedTask, SemaphoreTask

# the broker and backend come from CELERY_BROKER_URL and CELERY_RESULT_BACKEND
app = Celery("envproj")
app.conf.task_default_queue = os.environ["QUEUE"]
app.conf.redislock_prefix = os.environ["PREFIX"]


@app.task(base=LockedTask, lock_key="report:{account_id}")
def report(account_id):
    return account_id


@app.task(base=SemaphoreTask, semaphore_key="sync:{account_id}", semaphore_limit=2)
def sync(account_id):
    return account_id
"""


def test_a_worker_configured_only_by_the_environment_runs_guarded_tasks(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    (tmp_path / "envproj.py").write_text(ENV_APP)
    env = env_configured(tmp_path, redis_url, prefix)
    with worker(tmp_path, env, "-A", "envproj") as log:
        states = send(tmp_path, env, "envproj", "(report, (1,)), (sync, (1,))", "report, sync")
        text = log.read_text()
    assert states == ["SUCCESS", "SUCCESS"], text
    assert fence_keys(redis_url, prefix) == [
        f"{prefix}:{{report:1}}:fence",
        f"{prefix}:{{sync:1}}:fence",
    ]
    assert (
        f"lock Redis at {redact(redis_url)} (setting redislock_url unset, so the broker's is "
        "used: CELERY_BROKER_URL) reachable" in text
    ), text
    assert "ERROR" not in text, text


def test_a_worker_started_with_b_keeps_its_locks_on_that_broker(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    settings_broker, given = other_db(redis_url, 3), other_db(redis_url, 4)
    app_code = ENV_APP.replace(
        '"envproj")', f'"envproj")\napp.conf.broker_url = {settings_broker!r}'
    )  # the settings file names one broker, the command line another
    (tmp_path / "envproj.py").write_text(app_code)
    env = user_env(tmp_path, QUEUE=prefix, PREFIX=prefix)
    with worker(tmp_path, env, "-A", "envproj", "-b", given, "--result-backend", given) as log:
        out = run(
            tmp_path,
            env,
            "celery",
            "-A",
            "envproj",
            "-b",
            given,
            "--result-backend",
            given,
            "call",
            "envproj.report",
            "--args",
            "[7]",
        )
        task_id = out.strip().splitlines()[-1]
        backend = redis.Redis.from_url(given)
        wait_for(lambda: backend.exists(f"celery-task-meta-{task_id}"), 60, 0.1, "the result")
        text = log.read_text()
        status = run(tmp_path, env, "celery", "-A", "envproj", "-b", given, "redislock", "status")
    assert f"{prefix}:{{report:7}}:fence" in fence_keys(given, prefix)
    assert not fence_keys(settings_broker, prefix)
    assert f"lock Redis at {redact(given)} (" in text, text
    assert redact(given) in status, status


DJANGO_SETTINGS = {
    # old-style Celery names, ours upper case: no namespace (AllianceAuth's form)
    None: """
BROKER_URL = {broker!r}
CELERY_RESULT_BACKEND = {broker!r}
CELERY_DEFAULT_QUEUE = {queue!r}
REDISLOCK_URL = {locks!r}
CELERY_REDISLOCK_PREFIX = {prefix!r}
REDISLOCK_DEFAULT_TLL = 5  # misspelt on purpose
""",
    # namespace="CELERY": every setting, ours included, takes the prefix
    "CELERY": """
CELERY_BROKER_URL = {broker!r}
CELERY_RESULT_BACKEND = {broker!r}
CELERY_TASK_DEFAULT_QUEUE = {queue!r}
CELERY_REDISLOCK_URL = {locks!r}
CELERY_REDISLOCK_PREFIX = {prefix!r}
CELERY_REDISLOCK_DEFAULT_TLL = 5  # misspelt on purpose
""",
}

DJANGO_CELERY = """
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproj.settings")
app = Celery("djproj", include=["djproj.tasks"])
app.config_from_object("django.conf:settings", namespace={namespace!r})
"""

DJANGO_TASKS = """
from celery import shared_task

from celery_redislock import LockedTask


@shared_task(base=LockedTask, lock_key="report:{account_id}")
def report(account_id):
    return account_id
"""


@pytest.mark.parametrize("namespace", [None, "CELERY"])
def test_django_settings_with_and_without_a_namespace_reach_the_library(
    tmp_path: Path, redis_url: str, prefix: str, namespace: str | None
) -> None:
    pytest.importorskip("django", reason="pip install django (in the [test] extra)")
    locks = other_db(redis_url, 5)
    package = tmp_path / "djproj"
    package.mkdir()
    (package / "__init__.py").write_text("from .celery import app\n")
    settings = 'SECRET_KEY = "not-a-secret"\nINSTALLED_APPS = []\nUSE_TZ = True\n'
    settings += DJANGO_SETTINGS[namespace].format(
        broker=redis_url, queue=prefix, locks=locks, prefix=prefix
    )
    (package / "settings.py").write_text(settings)
    (package / "celery.py").write_text(DJANGO_CELERY.format(namespace=namespace))
    (package / "tasks.py").write_text(DJANGO_TASKS)
    env = user_env(tmp_path, DJANGO_SETTINGS_MODULE="djproj.settings")
    with worker(tmp_path, env, "-A", "djproj") as log:
        states = send(tmp_path, env, "djproj.tasks", "(report, (3,)),", "report")
        text = log.read_text()
        status = run(tmp_path, env, "celery", "-A", "djproj", "redislock", "status")
    assert states == ["SUCCESS"], text
    assert fence_keys(locks, prefix) == [f"{prefix}:{{report:3}}:fence"]
    assert not fence_keys(redis_url, prefix)
    read_from = "REDISLOCK_URL" if namespace is None else "CELERY_REDISLOCK_URL"
    assert f"lock Redis at {redact(locks)} (setting {read_from}) reachable" in text, text
    misspelt = "REDISLOCK_DEFAULT_TLL" if namespace is None else "CELERY_REDISLOCK_DEFAULT_TLL"
    right = "REDISLOCK_DEFAULT_TTL" if namespace is None else "CELERY_REDISLOCK_DEFAULT_TTL"
    assert f"setting {misspelt} is not read (misspelt): write {right}" in text, text
    assert redact(locks) in status, status


FACTORY_APP = (
    ENV_APP
    + """

import redis


def lock_client(url, options):
    return redis.Redis.from_url(os.environ["LOCKS"])  # not the URL it is given


app.conf.redislock_client_factory = lock_client
"""
)


def test_the_start_line_and_status_name_the_redis_a_client_factory_uses(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    locks = other_db(redis_url, 6)
    (tmp_path / "envproj.py").write_text(FACTORY_APP)
    env = env_configured(tmp_path, redis_url, prefix, LOCKS=locks)
    with worker(tmp_path, env, "-A", "envproj") as log:
        states = send(tmp_path, env, "envproj", "(report, (2,)),", "report")
        text = log.read_text()
        status = run(tmp_path, env, "celery", "-A", "envproj", "redislock", "status")
    assert states == ["SUCCESS"], text
    assert fence_keys(locks, prefix) == [f"{prefix}:{{report:2}}:fence"]
    where = f"redis://{urlsplit(locks).hostname}:{urlsplit(locks).port or 6379}/{db_of(locks)}"
    assert f"lock Redis at {where} (the client of setting redislock_client_factory)" in text
    assert redact(redis_url) not in text.split("lock Redis at", 1)[1].splitlines()[0]
    assert where in status, status


DEDUPE_APP = (
    ENV_APP
    + """

# One name, one run-time lock: "wait", so that the two take turns (LockedTask's
# default, "skip", would skip whichever starts second).
@app.task(base=LockedTask, lock_key="{a}:{b}", lock_dedupe=True, lock_policy="wait")
def send_invoice(a, b):
    return "invoice"


@app.task(base=LockedTask, lock_key="{a}:{b}", lock_dedupe=True, lock_policy="wait")
def send_receipt(a, b):
    return "receipt"
"""
)


def test_two_deduplicating_tasks_that_share_a_template_never_drop_each_other(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    (tmp_path / "envproj.py").write_text(DEDUPE_APP)
    env = env_configured(tmp_path, redis_url, prefix)
    code = textwrap.dedent("""
        from envproj import send_invoice, send_receipt
        calls = [send_invoice.delay(1, 2), send_invoice.delay(1, 2), send_receipt.delay(1, 2)]
        print(" ".join(c.id for c in calls))
    """)
    invoice, duplicate, receipt = run(tmp_path, env, sys.executable, "-c", code).split()
    assert duplicate == invoice  # a duplicate of the queued invoice: nothing published
    assert receipt != invoice  # another task: its own call, published
    backend = redis.Redis.from_url(redis_url)
    with worker(tmp_path, env, "-A", "envproj"):
        for meta in (f"celery-task-meta-{invoice}", f"celery-task-meta-{receipt}"):
            wait_for(lambda meta=meta: backend.exists(meta), 60, 0.1, meta)
    results = Celery(backend=redis_url, set_as_current=False)
    ended = {
        i: (results.AsyncResult(i).state, results.AsyncResult(i).result) for i in (invoice, receipt)
    }
    assert ended == {invoice: ("SUCCESS", "invoice"), receipt: ("SUCCESS", "receipt")}


# -- one client per app and process --------------------------------------------


class Connects:
    """Counts the TCP connections this process opens."""

    def __init__(self) -> None:
        self.count = 0
        self._real = socket.socket.connect

    def __enter__(self) -> Connects:
        real, counter = self._real, self

        def connect(sock: socket.socket, address: Any) -> Any:
            counter.count += 1
            return real(sock, address)

        socket.socket.connect = connect  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        socket.socket.connect = self._real  # type: ignore[method-assign]


def eager_app(redis_url: str, prefix: str, **conf: Any) -> Celery:
    app = Celery(f"eager-{uuid.uuid4().hex[:6]}", broker=redis_url, set_as_current=False)
    app.conf.update(task_always_eager=True, redislock_prefix=prefix, **conf)
    return app


def guarded_tasks(app: Celery) -> tuple[Any, Any]:
    @app.task(base=LockedTask, lock_key="once:{key}", lock_dedupe=True, shared=False)
    def once(key: int) -> int:
        return key

    @app.task(base=SemaphoreTask, semaphore_key="sem:{key}", semaphore_limit=2, shared=False)
    def capped(key: int) -> int:
        return key

    return once, capped


def exercise(once: Any, capped: Any) -> None:
    """Every way a process runs guarded tasks: eager ``delay``/``apply_async``
    (with the enqueue marker of ``lock_dedupe``) and ``apply()``."""
    for key in range(5):
        assert once.delay(key).get() == key
        assert once.apply((key,)).get() == key
        assert capped.apply_async((key,)).get() == key
        assert capped.apply((key,)).get() == key


def test_one_client_serves_every_call_of_a_process(redis_url: str, prefix: str) -> None:
    reset()
    tasks = guarded_tasks(eager_app(redis_url, prefix))
    exercise(*tasks)  # the first calls open what the process needs
    with Connects() as connects:
        exercise(*tasks)
    assert connects.count == 0


def test_a_client_factory_s_open_connection_is_the_only_one_used(
    redis_url: str, prefix: str
) -> None:
    """A user's test that forbids new sockets (Django's cache connection
    already open, say) runs guarded tasks through ``redislock_client_factory``."""
    reset()
    shared = redis.Redis.from_url(redis_url)
    shared.ping()  # already open, as the user's own connection is
    app = eager_app(redis_url, prefix, redislock_client_factory=lambda url, options: shared)
    with Connects() as connects:
        exercise(*guarded_tasks(app))
    assert connects.count == 0
    shared.close()


def test_a_client_factory_alone_is_enough_with_a_broker_that_is_not_redis(
    redis_url: str, prefix: str
) -> None:
    """docs/testing.md: an eager suite on ``memory://`` points the library at
    its own connection with the factory only (no ``redislock_url``); the
    factory is given ``""`` for the URL."""
    reset()
    shared = redis.Redis.from_url(redis_url)
    shared.ping()  # the suite's own connection, already open
    given: list[str] = []

    def factory(url: str, options: dict[str, Any]) -> redis.Redis:
        given.append(url)
        return shared

    app = eager_app(redis_url, prefix, redislock_client_factory=factory)
    app.conf.broker_url = "memory://"
    settings = settings_from_app(app)
    assert (settings.url, settings.url_setting) == ("", "redislock_client_factory")
    once, capped = guarded_tasks(app)
    with Connects() as connects:
        exercise(once, capped)
    assert connects.count == 0
    assert given == [""]
    left = {key.rsplit(b":", 1)[-1] for key in shared.scan_iter(f"{prefix}:*")}
    assert left == {b"fence"}, left  # each lock taken was released (fences stay)
    shared.close()


# -- every form of a setting, read in process ------------------------------------


def configured(source: dict[str, Any], namespace: str | None = None) -> Celery:
    """An app configured from an object holding ``source`` (a Django settings
    module, to Celery), with or without a namespace."""
    app = Celery(f"forms-{uuid.uuid4().hex[:6]}", set_as_current=False)
    app.config_from_object(type("settings", (), source), namespace=namespace)
    return app


@pytest.mark.parametrize(
    ("source", "namespace", "read_from"),
    [
        ({"redislock_url": "redis://h:1/2"}, None, "redislock_url"),
        ({"REDISLOCK_URL": "redis://h:1/2"}, None, "REDISLOCK_URL"),
        ({"CELERY_REDISLOCK_URL": "redis://h:1/2"}, None, "CELERY_REDISLOCK_URL"),
        ({"CELERY_REDISLOCK_URL": "redis://h:1/2"}, "CELERY", "CELERY_REDISLOCK_URL"),
        ({"redislock_url": "redis://h:1/2"}, "CELERY", "redislock_url"),
    ],
)
def test_every_form_config_from_object_accepts_is_read(
    source: dict[str, Any], namespace: str | None, read_from: str
) -> None:
    settings = settings_from_app(configured({**source, "BROKER_URL": "amqp://x//"}, namespace))
    assert (settings.url, settings.url_setting) == ("redis://h:1/2", read_from)
    assert settings.url_origin == f"setting {read_from}"


def test_two_forms_with_different_values_are_an_error() -> None:
    app = configured(
        {"REDISLOCK_URL": "redis://h/0", "REDISLOCK_PREFIX": "a", "CELERY_REDISLOCK_PREFIX": "b"}
    )
    with pytest.raises(ValueError, match="REDISLOCK_PREFIX and CELERY_REDISLOCK_PREFIX"):
        settings_from_app(app)


def test_settings_that_are_not_read_are_named_with_the_form_that_works() -> None:
    app = configured(
        {
            "CELERY_BROKER_URL": "redis://h/0",
            "REDISLOCK_URL": "redis://h/1",
            "CELERY_REDISLOCK_PARK_MX": 3,
            "CELERY_REDISLOCK_TTL": 3,
            "CELERY_REDISLOCK_HUE": 1,
        },
        "CELERY",
    )
    assert unread_settings(app) == [
        "celery-redislock: setting CELERY_REDISLOCK_HUE is not read (no such setting)",
        "celery-redislock: setting CELERY_REDISLOCK_PARK_MX is not read (misspelt): "
        "write CELERY_REDISLOCK_PARK_MAX",
        "celery-redislock: setting CELERY_REDISLOCK_TTL is not read (misspelt): "
        "write CELERY_REDISLOCK_DEFAULT_TTL",
        "celery-redislock: setting REDISLOCK_URL is not read (not the form this app reads): "
        "write CELERY_REDISLOCK_URL",
    ]
    assert settings_from_app(app).url == "redis://h/0"  # the unread URL is not used


@pytest.mark.parametrize(
    ("conf", "environ", "url", "source"),
    [
        ({"broker_url": "redis://a/1"}, {}, "redis://a/1", "broker_url"),
        (
            {"broker_url": "amqp://x//"},
            {"CELERY_BROKER_URL": "redis://e/2"},
            "redis://e/2",
            "CELERY_BROKER_URL",
        ),
        (
            {"broker_url": "redis://a/1", "broker_write_url": "redis://w/3"},
            {},
            "redis://w/3",
            "broker_write_url",
        ),
        (
            {"broker_url": "redis://a/1"},
            {"CELERY_BROKER_WRITE_URL": "redis://w/4"},
            "redis://w/4",
            "CELERY_BROKER_WRITE_URL",
        ),
        ({"broker_host": "redis://h/6"}, {}, "redis://h/6", "broker_host"),
        (
            {"broker_url": "redis://a/1", "broker_host": "redis://h/6"},
            {},
            "redis://a/1",
            "broker_url",
        ),
        ({"broker_url": "redis://a/1;redis://b/1"}, {}, "redis://a/1", "broker_url"),
        ({"broker_url": ["redis://a/5", "redis://b/5"]}, {}, "redis://a/5", "broker_url"),
        (
            {"broker_url": "sentinel://s1:26379;sentinel://s2:26379"},
            {},
            "sentinel://s1:26379;sentinel://s2:26379",
            "broker_url",
        ),
    ],
)
def test_the_broker_is_resolved_as_celery_resolves_it(
    conf: dict[str, Any],
    environ: dict[str, str],
    url: str,
    source: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("CELERY_BROKER_URL", "CELERY_BROKER_WRITE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    app = Celery(f"broker-{uuid.uuid4().hex[:6]}", set_as_current=False)
    app.conf.update(conf)
    settings = settings_from_app(app)
    assert (settings.url, settings.url_setting, settings.is_broker) == (url, source, True)


def test_an_old_style_broker_host_is_the_broker_as_celery_reads_it() -> None:
    app = configured({"BROKER_HOST": "redis://h/7"})
    assert app.conf.broker_url == "redis://h/7"  # Celery's own reading
    settings = settings_from_app(app)
    assert (settings.url, settings.url_setting) == ("redis://h/7", "broker_host")
    hidden = configured({"BROKER_HOST": "redis://h/7", "BROKER_URL": ""})
    assert not hidden.conf.broker_url  # a broker_url of "" hides broker_host, in Celery
    with pytest.raises(ValueError, match=r"the broker \(none\) is not Redis"):
        settings_from_app(hidden)
    bare = configured({"BROKER_HOST": "localhost"})  # its old sense: a host name
    with pytest.raises(
        ValueError, match=r"the broker 'localhost' \(setting broker_host .*\) is not a URL"
    ):
        settings_from_app(bare)


def test_a_run_time_change_wins_over_the_settings_module_in_any_spelling() -> None:
    app = configured({"CELERY_REDISLOCK_URL": "redis://a/0"}, "CELERY")
    app.conf.update(redislock_url="redis://b/0")  # as Celery: the change wins
    assert (settings_from_app(app).url, settings_from_app(app).url_setting) == (
        "redis://b/0",
        "redislock_url",
    )


def test_a_sentinel_broker_given_as_a_list_is_kept_whole() -> None:
    app = Celery(f"s-{uuid.uuid4().hex[:6]}", set_as_current=False)
    app.conf.broker_url = ["sentinel://s1:26379", "sentinel://s2:26379"]
    assert settings_from_app(app).url == "sentinel://s1:26379;sentinel://s2:26379"


def test_modules_and_a_lower_case_namespace_give_no_false_warning() -> None:
    import celery_redislock

    app = configured({"celery_redislock": celery_redislock, "REDISLOCK_URL": "redis://h/1"})
    assert unread_settings(app) == []  # an imported module is not a setting
    app = configured({"celery_broker_url": "redis://h/0", "REDISLOCK_URL": "redis://h/1"}, "celery")
    [line] = unread_settings(app)
    assert line.endswith("write celery_redislock_url or redislock_url"), line


def test_revoking_a_queued_deduplicated_task_by_name_gives_its_marker_back(
    redis_url: str, prefix: str
) -> None:
    from celery_redislock.enqueue.dedupe import claim, marker_key
    from celery_redislock.parking import revoke

    app = Celery(f"rv-{uuid.uuid4().hex[:6]}", set_as_current=False)
    app.conf.update(broker_url=redis_url, result_backend=redis_url, redislock_prefix=prefix)

    @app.task(base=LockedTask, lock_key="rv:{key}", lock_dedupe=True, shared=False)
    def refresh(key: int) -> None: ...

    reset()
    client = redis.Redis.from_url(redis_url)
    task_id = uuid.uuid4().hex  # queued in the broker, not parked
    assert claim(client, prefix, "rv:1", refresh.name, task_id, 60) is None
    assert revoke(app, task_id, "rv:1") == ""  # not in the park
    assert not client.exists(marker_key(prefix, "rv:1", refresh.name))
    assert app.AsyncResult(task_id).state == "REVOKED"


DJANGO_ON_COMMIT = """
import django

django.setup()

import redis
from django.conf import settings
from django.db import transaction

from djproj.tasks import report, slots

broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)


def queued():
    return broker.llen(settings.CELERY_TASK_DEFAULT_QUEUE)


with transaction.atomic():
    report.delay_on_commit(1)
    slots.apply_async_on_commit((2,))
    inside = queued()
after_commit = queued()
try:
    with transaction.atomic():
        report.delay_on_commit(3)
        raise RuntimeError("rolled back")
except RuntimeError:
    pass
print(inside, after_commit, queued())
"""


def test_a_guarded_task_publishes_on_commit_as_celery_s_django_task_does(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    """``delay_on_commit`` and ``apply_async_on_commit`` (Celery's
    ``DjangoTask``, the app's task class in a Django project since Celery
    5.4) work on a task declared with ``base=LockedTask`` or
    ``SemaphoreTask``: nothing is published inside the transaction, each
    call once it commits, nothing when it rolls back."""
    pytest.importorskip("django", reason="pip install django (in the [test] extra)")
    package = tmp_path / "djproj"
    package.mkdir()
    (package / "__init__.py").write_text("from .celery import app\n")
    settings = 'SECRET_KEY = "not-a-secret"\nINSTALLED_APPS = []\nUSE_TZ = True\n'
    settings += "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', "
    settings += f"'NAME': {str(tmp_path / 'db.sqlite3')!r}}}}}\n"
    settings += DJANGO_SETTINGS["CELERY"].format(
        broker=redis_url, queue=prefix, locks=redis_url, prefix=prefix
    )
    (package / "settings.py").write_text(settings)
    (package / "celery.py").write_text(DJANGO_CELERY.format(namespace="CELERY"))
    tasks = DJANGO_TASKS.replace("import LockedTask", "import LockedTask, SemaphoreTask")
    tasks += (
        '\n\n@shared_task(base=SemaphoreTask, semaphore_key="slots:{n}", semaphore_limit=2)\n'
        "def slots(n):\n    return n\n"
    )
    (package / "tasks.py").write_text(tasks)
    env = user_env(tmp_path, DJANGO_SETTINGS_MODULE="djproj.settings")
    out = run(tmp_path, env, sys.executable, "-c", DJANGO_ON_COMMIT)
    assert out.split() == ["0", "2", "2"], out
