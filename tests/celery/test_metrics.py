"""Prometheus metrics (docs/observability.md) from real prefork workers and a real Redis.

Every count is compared with what happened, as the task bodies and the
library's signals recorded it (tests/celery_apps/basic.py), read from one
scrape of the worker's main process: the counts of every pool child,
including one killed mid-run.  The exporter's gauges are compared with
``Parking.status``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_redislock import SKIPPED
from celery_redislock.core.capacity import Capacity
from celery_redislock.core.inspection import inspect_names
from celery_redislock.core.park import ParkConfig, Parking
from celery_redislock.settings import client_for
from celery_redislock.testing.servers import free_port
from tests.celery_apps.basic import create_app
from tests.celery_harness import worker_factory
from tests.processes import interruptible
from tests.waiting import wait_for

prometheus = pytest.importorskip(
    "prometheus_client", reason="needs prometheus-client: pip install 'celery-redislock[metrics]'"
)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

ONE_SLOT = Capacity.semaphore(1)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def config(redis_url: str) -> dict[str, str]:
    return {
        "redis": redis_url,
        "prefix": f"t-{uuid.uuid4().hex[:12]}",
        "metrics_port": str(free_port()),
        "park_sweep": "0.5",
    }


@pytest.fixture(scope="module")
def app(config: dict[str, str]) -> Any:
    return create_app(config)


@pytest.fixture(scope="module")
def worker(config: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with worker_factory(tmp_path_factory.mktemp("metrics")) as start:
        yield start(config, pool="prefork", concurrency=3)


#: The label names of docs/observability.md (``le``: a histogram's bucket).
LABELS = {"task", "kind", "outcome", "reason", "limit", "le"}
#: The values of ``outcome`` and ``reason`` docs/observability.md lists.
OUTCOMES = {"skip", "retry", "wait", "raise", "dedupe", "throttle", "redelivered", "park"}
OUTCOMES |= {"keep_latest", "rate"}
REASONS = {"finished", "retry", "paused", "limit", "worker lost", "terminated", "time limit"}
REASONS |= {"expired", "revoked", "discarded", "unclaimed", "superseded"}


def scrape(port: int | str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``http://127.0.0.1:port/metrics``, by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        body = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def served(port: int) -> dict[Any, float] | None:
    """A scrape of ``port``, None while nothing listens there yet."""
    try:
        return scrape(port)
    except OSError:
        return None


@contextlib.contextmanager
def exporter(redis_url: str, prefix: str, module: str = "tests.celery_apps.basic") -> Iterator[int]:
    """``celery redislock exporter -A module`` on a free port (yielded) for
    ``prefix``; stopped with Ctrl-C at the end, which must exit 0 without a
    traceback."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            module,
            "redislock",
            "--url",
            redis_url,
            "--prefix",
            prefix,
            "exporter",
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ],
        cwd=ROOT,
        env={**os.environ, "REDISLOCK_TEST_REDIS": redis_url, "REDISLOCK_TEST_PREFIX": prefix},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        yield port
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in output, output


def sample(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sum of ``name`` over the samples whose labels include ``labels``."""
    return sum(
        value
        for (n, have), value in samples.items()
        if n == name and set(labels.items()) <= set(have)
    )


def test_every_count_equals_what_ran_in_every_child(app: Any, worker: Any) -> None:
    port = app.conf.redislock_metrics_port
    key = uuid.uuid4().hex[:8]
    parked = [app.tasks["basic.parked"].delay(key, n, 0.3) for n in range(6)]  # limit 2
    skipped_first = app.tasks["basic.refresh_cache"].delay(key, 1.0)
    wait_for(lambda: app.recorder.events("refresh_cache", key), 60, message="the first refresh")
    skipped = [app.tasks["basic.refresh_cache"].delay(key, 0.1) for _ in range(3)]
    victim = app.tasks["basic.sleeper"].delay(key, 60)
    started = wait_for(lambda: app.recorder.events("sleeper", key), 60, message="the sleeper")
    os.kill(started[0]["pid"], signal.SIGKILL)  # a child dies mid-run; Celery replaces it
    for r in [*parked, skipped_first]:
        r.get(timeout=120)
    wait_for(lambda: all(r.state == SKIPPED for r in skipped), 60, message="three SKIPPED")
    wait_for(lambda: victim.state == "FAILURE", 120, message="the killed run's FAILURE")

    def starts(task: str) -> int:
        return sum(e["what"] == "start" for e in app.recorder.events(task, key))

    def ends(task: str) -> int:
        return sum(e["what"] == "end" for e in app.recorder.events(task, key))

    expected = {
        ("redislock_acquired_total", "basic.parked"): 6,
        ("redislock_acquired_total", "basic.refresh_cache"): starts("refresh_cache"),
        ("redislock_acquired_total", "basic.sleeper"): 1,  # the dead child's count is kept
        ("redislock_wait_seconds_count", "basic.parked"): 6,
        ("redislock_hold_seconds_count", "basic.parked"): ends("parked"),
        ("redislock_reclaimed_total", "basic.sleeper"): 1,
    }

    def met() -> bool:
        samples = scrape(port)
        return all(sample(samples, n, task=t) == v for (n, t), v in expected.items())

    wait_for(met, 60, message=f"the scrape to show {expected}")
    samples = scrape(port)
    assert starts("refresh_cache") == 1  # the other three were skipped
    assert (
        sample(samples, "redislock_contended_total", task="basic.refresh_cache", outcome="skip")
        == 3
    )
    signals = app.recorder.signals()
    # Counted where they happen: parkings at enqueue happen in this process.
    parked_signals = sum(
        s["signal"] == "redislock_parked"
        and s["pid"] != os.getpid()
        and s["task_id"] in {r.id for r in parked}
        for s in signals
    )
    assert (
        sample(samples, "redislock_contended_total", task="basic.parked", outcome="park")
        == parked_signals
    )
    promoted_signals = sum(
        s["signal"] == "redislock_promoted" and s["task_id"] in {r.id for r in parked}
        for s in signals
    )
    assert sample(samples, "redislock_promoted_total", task="basic.parked") == promoted_signals
    assert sample(samples, "redislock_released_total", task="basic.parked", reason="finished") == 6
    assert (
        sample(samples, "redislock_released_total", task="basic.sleeper", reason="worker lost") == 1
    )
    assert sample(samples, "redislock_lost_total") == 0
    assert all(
        dict(labels).get("kind") in {"lock", "semaphore", "rate"}
        for (name, labels) in samples
        if name.startswith("redislock_") and "kind" in dict(labels)
    )
    assert not any("key" in dict(labels) for _, labels in samples)  # never the lock key
    # Bounded labels only (celery-exporter #157 #387): no hostname, pid, task
    # id or key; outcome and reason from the lists of docs/observability.md.
    ours = [dict(labels) for name, labels in samples if name.startswith("redislock_")]
    assert {label for labels in ours for label in labels} <= LABELS
    documented = {"outcome": OUTCOMES, "reason": REASONS}
    for label, values in documented.items():
        assert {labels[label] for labels in ours if label in labels} <= values, label


def test_the_exporter_serves_the_parks_gauges(app: Any, redis_url: str) -> None:
    """``celery redislock exporter``: parked counts, oldest age and overdue
    promotions per task name, as ``Parking.status`` reads them."""
    client, _ = client_for(app)
    prefix = f"x-{uuid.uuid4().hex[:12]}"  # no sweeper of a worker looks here
    name = f"park:{uuid.uuid4().hex[:8]}"
    park = Parking(client, prefix, name)
    envelope = '{"task": "basic.parked", "headers": {}}'
    first = park.enqueue("e1", ONE_SLOT, envelope, 0, ParkConfig(deadline=0.2), "basic.parked")
    assert first.token > 0
    for n in range(2, 5):
        assert (
            park.enqueue(f"e{n}", ONE_SLOT, envelope, 0, ParkConfig(), "basic.parked").count
            == n - 1
        )
    wait_for(lambda: park.status().overdue == 1, 10, message="the promotion overdue")
    with exporter(redis_url, prefix) as port:
        samples = wait_for(lambda: served(port), 60, message="the exporter")
        status = park.status()
        labels = {"task": "basic.parked", "kind": "semaphore"}
        assert sample(samples, "redislock_parked", **labels) == status.parked == 3
        assert sample(samples, "redislock_promotions_overdue", **labels) == status.overdue == 1
        assert sample(samples, "redislock_parked_keys", **labels) == 1
        age = sample(samples, "redislock_parked_oldest_age_seconds", **labels)
        assert status.oldest_age is not None and 0 <= age <= status.oldest_age + 1


def test_the_exporter_counts_slots_in_use_and_keys_at_their_limit(
    app: Any, worker: Any, config: dict[str, str], redis_url: str
) -> None:
    """``redislock_slots_in_use`` and ``redislock_keys_at_limit`` equal what
    ``status`` reads from the lease sets while prefork children hold them, and
    fall to nothing once the runs end (the held index, not a SCAN)."""
    client, _ = client_for(app)
    full, light, cache = (uuid.uuid4().hex[:8] for _ in range(3))
    runs = [app.tasks["basic.parked"].delay(full, n, 60, True) for n in range(2)]  # limit 2
    runs.append(app.tasks["basic.refresh_cache"].delay(cache, 60, True))  # a lock

    def starts() -> int:
        events = [
            *app.recorder.events("parked", full),
            *app.recorder.events("refresh_cache", cache),
        ]
        return sum(e["what"] == "start" for e in events)

    wait_for(lambda: starts() == 3, 60, message="three runs holding")
    with exporter(redis_url, config["prefix"]) as port:
        samples = wait_for(lambda: served(port), 60, message="the exporter")
        states = {
            s.name: s
            for s in inspect_names(client, config["prefix"], [f"park:{full}", f"cache:{cache}"])
        }
        assert (
            len(states[f"park:{full}"].holders)
            == 2
            == sample(samples, "redislock_slots_in_use", task="basic.parked", kind="semaphore")
        )
        assert (
            len(states[f"cache:{cache}"].holders)
            == 1
            == sample(samples, "redislock_slots_in_use", task="basic.refresh_cache", kind="lock")
        )
        assert sample(samples, "redislock_keys_at_limit", task="basic.parked") == 1
        assert sample(samples, "redislock_keys_at_limit", task="basic.refresh_cache") == 1
        # One more key of basic.parked, below its limit: in use, not at it.
        runs.append(app.tasks["basic.parked"].delay(light, 0, 60, True))

        def in_use() -> float:
            return sample(scrape(port), "redislock_slots_in_use", task="basic.parked")

        wait_for(lambda: in_use() == 3, 60, message="the third slot")
        assert sample(scrape(port), "redislock_keys_at_limit", task="basic.parked") == 1
        for key in (full, light, cache):
            client.set(f"{config['prefix']}:gate:{key}", 1)
        for r in runs:
            r.get(timeout=60)
        wait_for(
            lambda: sample(scrape(port), "redislock_slots_in_use") == 0,
            30,
            message="no slot in use once the runs ended",
        )
        assert sample(scrape(port), "redislock_keys_at_limit") == 0


def envelope(task: str) -> str:
    return json.dumps({"task": task, "headers": {}})


def test_the_exporter_counts_keys_waiting_for_a_listed_limit_by_the_limit_declared(
    redis_url: str,
) -> None:
    """``redislock_parked_keys_waiting_for``: keys whose parked work is held
    for a listed limit, labelled with the limit as the task declares it (a
    fixed name as is), from ``celery redislock exporter`` on the app that
    declares it; a key of a task the app does not know: ``unknown``."""
    from celery_redislock.core.rate import NO_RATE

    prefix = f"x-{uuid.uuid4().hex[:12]}"
    client = __import__("redis").Redis.from_url(redis_url)
    for name, task in [
        ("acct:a", "listed.charge_park"),
        ("acct:b", "listed.charge_park"),
        ("acct:c", "other.task"),
    ]:
        parked = Parking(client, prefix, name).park_at_head(
            f"{name}-1", ONE_SLOT, envelope(task), 0, 0, task, NO_RATE, hold=120, waits_for="shared"
        )
        assert parked.count == 1
    unheld = Parking(client, prefix, "acct:d")
    charge = "listed.charge_park"
    assert unheld.park_at_head("acct:d-1", ONE_SLOT, envelope(charge), 0, 0, charge, NO_RATE).count
    with exporter(redis_url, prefix, "tests.celery_apps.listed") as port:
        samples = wait_for(lambda: served(port), 60, message="the exporter")
        name = "redislock_parked_keys_waiting_for"
        assert sample(samples, name, task="listed.charge_park", limit="shared") == 2
        assert sample(samples, name, task="other.task", limit="unknown") == 1
        assert sample(samples, name) == 3
        assert sample(samples, "redislock_parked_keys") == 4


def test_a_templated_listed_limit_is_labelled_by_its_template_never_the_name(
    redis_url: str,
) -> None:
    """The gauge's ``limit`` label for a templated listed limit is the
    template (bounded), found by matching the name against each of the task's
    limits; a name that fits none, or several, is ``unknown``."""
    from celery import Celery

    from celery_redislock import Limit, SemaphoreTask
    from celery_redislock.admin.gauges import RedisGauges
    from celery_redislock.core.rate import NO_RATE

    app = Celery("gauges", broker="memory://", set_as_current=False)

    def pool(region: str) -> str:
        return f"pool-{region}"

    @app.task(
        name="g.sync",
        shared=False,
        base=SemaphoreTask,
        semaphore_key="acct:{account}",
        semaphore_limit=2,
        limits=[Limit("region:{region}", 5), Limit("api", 9)],
    )
    def sync(account: str, region: str) -> None: ...

    @app.task(
        name="g.copy",
        shared=False,
        base=SemaphoreTask,
        semaphore_key="acct:{account}",
        semaphore_limit=2,
        limits=[Limit(pool, 5)],
    )
    def copy(account: str, region: str) -> None: ...

    prefix = f"x-{uuid.uuid4().hex[:12]}"
    client = __import__("redis").Redis.from_url(redis_url)
    for name, task, limit in [
        ("acct:1", "g.sync", "region:eu"),
        ("acct:2", "g.sync", "region:us"),
        ("acct:3", "g.sync", "api"),
        ("acct:4", "g.copy", "pool-eu"),
    ]:
        Parking(client, prefix, name).park_at_head(
            f"{name}-1", ONE_SLOT, envelope(task), 0, 0, task, NO_RATE, hold=120, waits_for=limit
        )
    (family,) = [
        f
        for f in RedisGauges(client, prefix, dict(app.tasks)).collect()
        if f.name == "redislock_parked_keys_waiting_for"
    ]
    counts = {(s.labels["task"], s.labels["limit"]): s.value for s in family.samples}
    assert counts == {
        ("g.sync", "region:{region}"): 2,
        ("g.sync", "api"): 1,
        ("g.copy", "pool"): 1,
    }
