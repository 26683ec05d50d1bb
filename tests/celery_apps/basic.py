"""Test app: guarded tasks that record what their bodies did into Redis.

The worker runs ``celery -A tests.celery_apps.basic worker``; the module
builds ``app`` from environment variables (see :func:`config_from_env`).  The
test process builds an equal app with :func:`create_app` and the same config,
so task names and settings match.

Config keys (``REDISLOCK_TEST_<KEY>`` in the worker's environment):
``redis`` (default result backend, broker and lock Redis), ``prefix`` (lock
key prefix, queue name and record keys), ``broker``, ``backend`` (the result
backend, e.g. ``rpc://``; ``none``: none), ``lock_redis``, ``ttl``
(``redislock_default_ttl``), ``prefetch``, ``acks_late`` ("1"),
``visibility`` (Redis broker ``visibility_timeout``), ``lost_wait``
(Celery's ``worker_lost_wait``, default 20 s), ``ready_file``,
``park_deadline`` / ``park_max`` / ``park_max_total`` / ``park_sweep`` /
``park_max_publishes``
(``redislock_park_*``), ``pickle`` ("1": pickle accepted beside JSON).

Fault injection for the park policy: a worker process that finds the key
``<prefix>:fault:<point>`` (and deletes it) kills itself, loses, delays or
duplicates a publish at that point (see :func:`_install_faults`).

Every recording task appends JSON events (``start``/``end`` with wall-clock
time, pid, task id, retries) to ``<prefix>:rec:<task>:<key>``: assertions come
from the task bodies themselves.  Library signals are appended to
``<prefix>:signals`` in whatever process sends them.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import redis
from celery import Celery
from celery.exceptions import Ignore, Reject, Retry
from kombu import Exchange, Queue

from celery_redislock import FencedResource, LockedTask, RateLimitedTask, SemaphoreTask, signals

from . import write_pid_when_ready

ENV_PREFIX = "REDISLOCK_TEST_"


def config_from_env() -> dict[str, str]:
    return {
        k[len(ENV_PREFIX) :].lower(): v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)
    }


def env_from_config(config: dict[str, str]) -> dict[str, str]:
    return {ENV_PREFIX + k.upper(): str(v) for k, v in config.items()}


class Recorder:
    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self._client: Any = None
        self._pid = 0

    @property
    def client(self) -> Any:
        if self._client is None or self._pid != os.getpid():
            self._client = redis.Redis.from_url(self.url, socket_timeout=10)
            self._pid = os.getpid()
        return self._client

    def key(self, task: str, key: object) -> str:
        return f"{self.prefix}:rec:{task}:{key}"

    def event(self, task: Any, key: object, what: str, **data: Any) -> None:
        request = task.request
        record = {
            "what": what,
            "t": time.time(),
            "pid": os.getpid(),
            "id": request.id,
            "retries": request.retries,
            "hostname": request.hostname,
            **data,
        }
        self.client.rpush(self.key(task.name.rsplit(".", 1)[-1], key), json.dumps(record))

    def events(self, task: str, key: object) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.client.lrange(self.key(task, key), 0, -1)]

    def signals(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.client.lrange(f"{self.prefix}:signals", 0, -1)]


def topic_queues(prefix: str) -> list[Queue]:
    """The default queue, and one bound to a topic exchange (``special.#``)."""
    topic = Exchange(f"topic-{prefix}", type="topic")
    return [
        Queue(f"q-{prefix}", routing_key=f"q-{prefix}"),
        Queue(f"special-{prefix}", topic, routing_key="special.#"),
    ]


def quorum_queues(prefix: str) -> list[Queue]:
    """Quorum queues on a topic exchange (Celery >= 5.5 then sends a countdown
    through RabbitMQ's delayed exchanges, routed by the queue the call names,
    else the default one): the default queue, and one a worker may consume
    alone."""
    topic = Exchange(f"qtopic-{prefix}", type="topic")
    quorum = {"x-queue-type": "quorum"}
    return [
        Queue(f"q-{prefix}", topic, routing_key=f"q-{prefix}", queue_arguments=quorum),
        Queue(f"special-{prefix}", topic, routing_key=f"special-{prefix}", queue_arguments=quorum),
    ]


def colliding_queues(prefix: str) -> list[Queue]:
    """The default queue; ``work-<prefix>`` bound to a topic exchange by
    ``orders-<prefix>.#``; and a queue named like one of that exchange's
    routing keys, ``orders-<prefix>.eu`` (through the default exchange)."""
    topic = Exchange(f"orders-{prefix}", type="topic")
    return [
        Queue(f"q-{prefix}", routing_key=f"q-{prefix}"),
        Queue(f"work-{prefix}", topic, routing_key=f"orders-{prefix}.#"),
        Queue(f"orders-{prefix}.eu", routing_key=f"orders-{prefix}.eu"),
    ]


def create_app(config: dict[str, str]) -> Celery:
    if config.get("pickle") == "1":  # Celery refuses pickle under root without it
        os.environ.setdefault("C_FORCE_ROOT", "1")
    redis_url = config["redis"]
    prefix = config["prefix"]
    app = Celery("basic", set_as_current=False)
    app.conf.update(
        broker_url=config.get("broker", redis_url),
        # config "backend" "none": no result backend (Celery's DisabledBackend)
        result_backend=None
        if config.get("backend") == "none"
        else config.get("backend") or redis_url,
        redislock_url=config.get("lock_redis", redis_url),
        redislock_prefix=prefix,
        # config "ttl_setting": the setting as given (a worker with a bad setting)
        redislock_default_ttl=config.get("ttl_setting") or float(config.get("ttl", 30)),
        task_default_queue=f"q-{prefix}",
        # config "topic": a queue bound to a topic exchange, for per-call routing
        task_queues=(
            topic_queues(prefix)
            if config.get("topic") == "1"
            else quorum_queues(prefix)
            if config.get("quorum") == "1"
            else colliding_queues(prefix)
            if config.get("collide") == "1"
            else None
        ),
        worker_prefetch_multiplier=int(config.get("prefetch", 1)),
        task_acks_late=config.get("acks_late") == "1",
        task_reject_on_worker_lost=config.get("acks_late") == "1",
        broker_transport_options=(
            {
                "visibility_timeout": float(config["visibility"]),
                "unacked_restore_interval": 0.5,
                "unacked_restore_throttle": 1,
            }
            if "visibility" in config
            else {}
        ),
        broker_connection_retry_on_startup=True,
        result_expires=600,
        # config "pickle": a per-call serializer="pickle" is accepted too
        accept_content=["json", "pickle"] if config.get("pickle") == "1" else ["json"],
        worker_hijack_root_logger=False,
        # Celery reports a lost child only after this; the library must not wait for it.
        worker_lost_wait=float(config.get("lost_wait", 20.0)),
        redislock_park_deadline=float(config.get("park_deadline", 60)),
        redislock_park_max=int(config.get("park_max", 0)),
        redislock_park_max_total=int(config.get("park_max_total", 0)),
        redislock_park_max_publishes=int(config.get("park_max_publishes", 10)),
        redislock_park_sweep_interval=float(config.get("park_sweep", 0.5)),
        redislock_metrics_port=int(config["metrics_port"]) if "metrics_port" in config else None,
        redislock_metrics_host="127.0.0.1",
    )
    rec = Recorder(redis_url, prefix)
    app.recorder = rec  # type: ignore[attr-defined]

    def body(
        task: Any, key: object, duration: float, gate: bool = False, **data: Any
    ) -> dict[str, Any]:
        lease = task.request.redislock
        rec.event(task, key, "start", token=lease.token, name=lease.name, **data)
        if gate:  # run until the test opens the gate (or `duration` passes)
            deadline = time.monotonic() + duration
            while not rec.client.exists(f"{prefix}:gate:{key}") and time.monotonic() < deadline:
                time.sleep(0.02)
        else:
            time.sleep(duration)
        rec.event(task, key, "end", owned=lease.owned())
        return {"token": lease.token, "name": lease.name}

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.refresh_cache",
        lock_key="cache:{user_id}",
    )
    def refresh_cache(self: Any, user_id: Any, duration: float = 0.5, gate: bool = False) -> Any:
        return body(self, user_id, duration, gate)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.keep_latest",
        lock_key="latest:{key}",
        lock_policy="keep_latest",
    )
    def keep_latest(
        self: Any, key: Any, value: int, duration: float = 0.2, gate: bool = False
    ) -> Any:
        return body(self, key, duration, gate, value=value)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.keep_latest_retrying",
        lock_key="lretry:{key}",
        lock_policy="keep_latest",
        max_retries=1,
    )
    def keep_latest_retrying(
        self: Any, key: Any, value: int, retry_in: float = -1.0, die: bool = False
    ) -> Any:
        """With ``retry_in`` >= 0 its first run waits for the gate, then retries
        with that countdown; with ``die`` its process SIGKILLs itself just after
        the retry is stored (before the run gives its lock back)."""
        lease = self.request.redislock
        rec.event(self, key, "start", value=value, retries=self.request.retries, token=lease.token)
        if retry_in >= 0 and self.request.retries == 0:
            deadline = time.monotonic() + 60
            while not rec.client.exists(f"{prefix}:gate:{key}") and time.monotonic() < deadline:
                time.sleep(0.02)
            try:
                raise self.retry(countdown=retry_in)
            except Retry:
                if die:
                    os.kill(os.getpid(), signal.SIGKILL)
                raise
        rec.event(self, key, "end", value=value)
        return value

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.debounced",
        lock_key="debounce:{key}",
        lock_policy="keep_latest",
        lock_debounce=0.5,
        lock_debounce_max=1.5,
    )
    def debounced(self: Any, key: Any, value: int, duration: float = 0.05) -> Any:
        return body(self, key, duration, value=value)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.throttled",
        lock_key="throttle:{key}",
        lock_policy="keep_latest",
        lock_throttle=1.0,
    )
    def throttled(self: Any, key: Any, value: int, duration: float = 0.05) -> Any:
        return body(self, key, duration, value=value)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.throttled_leading",
        lock_key="throttle:{key}",
        lock_policy="keep_latest",
        lock_throttle=1.0,
        lock_throttle_trailing=False,
    )
    def throttled_leading(self: Any, key: Any, value: int, duration: float = 0.05) -> Any:
        return body(self, key, duration, value=value)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.superseding",
        lock_key="sup:{key}",
        lock_policy="keep_latest",
        lock_supersede=True,
        lock_ttl=3,
    )
    def superseding(self: Any, key: Any, value: int, checkpoint: bool, seconds: float) -> Any:
        """Writes ``value`` to a resource guarded by its lock every 50 ms for
        ``seconds``, recording each write's fate; with ``checkpoint`` it calls
        ``checkpoint()`` before each write."""
        lock = self.request.redislock
        resource = FencedResource(rec.client, f"{lock.keys.base}:data", guard=lock)
        rec.event(self, key, "start", value=value, token=lock.token)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if checkpoint:
                lock.checkpoint()
            accepted = bool(resource.write(lock.token, value))
            rec.event(
                self, key, "write", value=value, accepted=accepted, superseded=lock.superseded
            )
            time.sleep(0.05)
        rec.event(self, key, "end", value=value)
        return value

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.refresh_dedupe",
        lock_key="dedupe:{user_id}",
        lock_dedupe=True,
    )
    def refresh_dedupe(self: Any, user_id: Any, duration: float = 0.5, gate: bool = False) -> Any:
        return body(self, user_id, duration, gate)

    @app.task(
        shared=False,
        bind=True,
        base=SemaphoreTask,
        name="basic.sync_account",
        semaphore_key="account:{account_id}",
        semaphore_limit=2,
        lock_retry_countdown=0.1,
        lock_retry_jitter=0.3,
        lock_retry_max=None,
    )
    def sync_account(self: Any, account_id: Any, n: int = 0, duration: float = 0.3) -> Any:
        return body(self, account_id, duration, n=n)

    @app.task(
        shared=False,
        bind=True,
        base=SemaphoreTask,
        name="basic.parked",
        semaphore_key="park:{key}",
        semaphore_limit=2,
    )
    def parked(self: Any, key: Any, n: int = 0, duration: float = 0.2, gate: bool = False) -> Any:
        ptoken = (self.request.headers or {}).get("redislock_park_token")
        return body(self, key, duration, gate, n=n, ptoken=ptoken)

    @app.task(
        shared=False,
        bind=True,
        base=SemaphoreTask,
        name="basic.parked_payload",
        semaphore_key="park:{key}",
        semaphore_limit=2,
    )
    def parked_payload(self: Any, key: Any, payload: Any) -> Any:
        """``basic.parked``'s key, any payload (recorded by its type and repr,
        with the names of the custom headers the body sees)."""
        seen = sorted(self.request.headers or {})
        request = self.request
        return body(
            self,
            key,
            0.0,
            payload=f"{type(payload).__name__} {payload!r}",
            headers=seen,
            argsrepr=request.argsrepr,
            kwargsrepr=request.kwargsrepr,
            parent_id=request.parent_id,
            root_id=request.root_id,
            priority=(request.delivery_info or {}).get("priority"),
            ignore_result=getattr(request, "ignore_result", None),
        )

    @app.task(
        shared=False,
        bind=True,
        base=SemaphoreTask,
        name="basic.parked_wide",
        semaphore_key="park:{key}",  # the key of basic.parked, with a higher limit
        semaphore_limit=5,
    )
    def parked_wide(
        self: Any, key: Any, n: int = 0, duration: float = 0.2, gate: bool = False
    ) -> Any:
        return body(self, key, duration, gate, n=n)

    @app.task(
        shared=False,
        bind=True,
        base=SemaphoreTask,
        name="basic.parked_dedupe",
        semaphore_key="park:{key}",  # the key of basic.parked
        semaphore_limit=2,
        lock_dedupe=True,
    )
    def parked_dedupe(self: Any, key: Any, n: int = 0, duration: float = 0.2) -> Any:
        return body(self, key, duration, n=n)

    def plan_limit(key: Any, **_: Any) -> int:
        """A per-account limit an operator changes in Redis (a plan change)."""
        return int(rec.client.get(f"{prefix}:plan:{key}") or 3)

    @app.task(
        shared=False,
        bind=True,
        base=SemaphoreTask,
        name="basic.parked_plan",
        semaphore_key="plan:{key}",
        semaphore_limit=plan_limit,
    )
    def parked_plan(
        self: Any, key: Any, n: int = 0, duration: float = 0.2, gate: bool = False
    ) -> Any:
        return body(self, key, duration, gate, n=n)

    # Rate limits (docs/rate.md): the recorded name is the task's short name.
    @app.task(
        shared=False,
        bind=True,
        base=RateLimitedTask,
        name="basic.rated",
        rate_key="rate:{key}",
        rate=config.get("rate", "5/s"),
    )
    def rated(self: Any, key: Any, n: int = 0, duration: float = 0.0) -> Any:
        return body(self, key, duration, n=n)

    @app.task(
        shared=False,
        bind=True,
        base=SemaphoreTask,
        name="basic.rated_capped",
        semaphore_key="rcap:{key}",
        semaphore_limit=2,
        rate="10/s",
    )
    def rated_capped(self: Any, key: Any, n: int = 0, duration: float = 0.5) -> Any:
        return body(self, key, duration, n=n)

    @app.task(
        shared=False,
        bind=True,
        base=RateLimitedTask,
        name="basic.rated_skip",
        rate_key="rskip:{key}",
        rate="1/m",
        lock_policy="skip",
    )
    def rated_skip(self: Any, key: Any, n: int = 0) -> Any:
        return body(self, key, 0.0, n=n)

    @app.task(
        shared=False,
        bind=True,
        base=RateLimitedTask,
        name="basic.rated_raise",
        rate_key="rraise:{key}",
        rate="1/m",
        lock_policy="raise",
    )
    def rated_raise(self: Any, key: Any, n: int = 0) -> Any:
        return body(self, key, 0.0, n=n)

    @app.task(
        shared=False,
        bind=True,
        base=RateLimitedTask,
        name="basic.rated_retry",
        rate_key="rretry:{key}",
        rate="4/s",
        lock_policy="retry",
        lock_retry_jitter=0.0,
        max_retries=0,  # the rate's requeues must not spend the body's budget
    )
    def rated_retry(self: Any, key: Any, n: int = 0) -> Any:
        return body(self, key, 0.0, n=n)

    @app.task(
        shared=False,
        bind=True,
        base=RateLimitedTask,
        name="basic.rated_cost",
        rate_key="rcost:{key}",
        rate="4/s",
        rate_burst=2,
        rate_cost=lambda units, **_: units,
    )
    def rated_cost(self: Any, key: Any, units: int = 1, n: int = 0) -> Any:
        return body(self, key, 0.0, n=n, units=units)

    @app.task(
        shared=False,
        bind=True,
        base=RateLimitedTask,
        name="basic.rated_backoff",
        rate_key="rback:{key}",
        rate="20/s",
    )
    def rated_backoff(self: Any, key: Any, n: int = 0, pause: float = 0.0) -> Any:
        """Asks for a pause of its key (an upstream 429) on its first run when
        ``pause`` is set and the test armed ``<prefix>:backoff:<key>``."""
        rec.event(self, key, "start", n=n)
        if pause and rec.client.delete(f"{prefix}:backoff:{key}"):
            rec.event(self, key, "paused", n=n)
            self.redislock_pause(pause)
        rec.event(self, key, "end", n=n)
        return n

    @app.task(
        shared=False,
        bind=True,
        base=RateLimitedTask,
        name="basic.rated_backoff_gated",
        rate_key="rbackg:{key}",
        rate="20/s",
    )
    def rated_backoff_gated(
        self: Any, key: Any, n: int = 0, pause: float = 0.0, gate: float = 0.0
    ) -> Any:
        """``rated_backoff`` with gates: the run that pauses waits (at most ``gate``
        seconds) until the test sets ``<prefix>:pregate:<key>`` before it pauses,
        and every other run until it sets ``<prefix>:gate:<key>``."""

        def wait_open(gate_key: str) -> None:
            deadline = time.monotonic() + gate
            while time.monotonic() < deadline and not rec.client.exists(gate_key):
                time.sleep(0.02)

        rec.event(self, key, "start", n=n)
        if pause and rec.client.delete(f"{prefix}:backoff:{key}"):
            wait_open(f"{prefix}:pregate:{key}")
            rec.event(self, key, "paused", n=n)
            self.redislock_pause(pause)
        wait_open(f"{prefix}:gate:{key}")
        rec.event(self, key, "end", n=n)
        return n

    @app.task(shared=False, name="basic.collect")
    def collect(results: list[Any]) -> int:
        """A plain chord callback."""
        return len(results)

    @app.task(
        shared=False,
        bind=True,
        base=SemaphoreTask,
        name="basic.parked_retry",
        semaphore_key="park:{key}",
        semaphore_limit=2,
    )
    def parked_retry(self: Any, key: Any, countdown: float = 2.0) -> Any:
        rec.event(self, key, "start")
        if self.request.retries == 0:
            raise self.retry(countdown=countdown)
        return self.request.retries

    @app.task(
        shared=False, bind=True, base=LockedTask, name="basic.sleeper", lock_key="sleep:{key}"
    )
    def sleeper(self: Any, key: Any, duration: float = 1.0) -> Any:
        return body(self, key, duration)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.impatient",
        lock_key="sleep:{key}",
        lock_policy="wait",
        lock_wait_timeout=0.5,
    )
    def impatient(self: Any, key: Any, duration: float = 1.0) -> Any:
        return body(self, key, duration)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.patient",
        lock_key="patient:{key}",
        lock_policy="wait",
        lock_wait_timeout=300,
    )
    def patient(self: Any, key: Any, gate: bool = False) -> Any:
        """Waits in the key's queue for as long as it takes; with ``gate`` it
        holds the key until the test opens the gate."""
        return body(self, key, 300 if gate else 0.05, gate)

    @app.task(
        shared=False, bind=True, base=LockedTask, name="basic.stubborn", lock_key="sleep:{key}"
    )
    def stubborn(self: Any, key: Any, duration: float = 1.0) -> Any:
        # SIGTERM is blocked: only SIGKILL ends this body early, so nothing in
        # this process can release the lock then.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            return body(self, key, duration)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.limited_retry",
        lock_key="sleep:{key}",
        lock_policy="retry",
        lock_retry_max=2,
        lock_retry_countdown=0.1,
        lock_retry_jitter=0.0,
    )
    def limited_retry(self: Any, key: Any, duration: float = 0.1) -> Any:
        return body(self, key, duration)

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.fail",
        lock_key="fail:{key}",
    )
    def fail(self: Any, key: Any) -> Any:
        rec.event(self, key, "start")
        raise ValueError(f"failing on purpose: {key}")

    @app.task(
        shared=False, bind=True, base=LockedTask, name="basic.retrying", lock_key="retry:{key}"
    )
    def retrying(self: Any, key: Any, times: int = 1) -> Any:
        rec.event(self, key, "start", token=self.request.redislock.token)
        if self.request.retries < times:
            raise self.retry(countdown=0)
        return self.request.retries

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.autoretrying",
        lock_key="autoretry:{key}",
        autoretry_for=(KeyError,),
        retry_kwargs={"countdown": 0},
        max_retries=3,
    )
    def autoretrying(self: Any, key: Any, times: int = 1) -> Any:
        rec.event(self, key, "start", token=self.request.redislock.token)
        if self.request.retries < times:
            raise KeyError(key)
        return self.request.retries

    @app.task(
        shared=False, bind=True, base=LockedTask, name="basic.ignoring", lock_key="ignore:{key}"
    )
    def ignoring(self: Any, key: Any) -> Any:
        rec.event(self, key, "start")
        raise Ignore()

    @app.task(
        shared=False, bind=True, base=LockedTask, name="basic.rejecting", lock_key="reject:{key}"
    )
    def rejecting(self: Any, key: Any) -> Any:
        rec.event(self, key, "start")
        raise Reject("rejecting on purpose", requeue=False)

    @app.task(
        shared=False, bind=True, base=LockedTask, name="basic.watch_lost", lock_key="lost:{key}"
    )
    def watch_lost(self: Any, key: Any, timeout: float = 20.0) -> Any:
        lease = self.request.redislock
        rec.event(self, key, "start", token=lease.token)
        deadline = time.monotonic() + timeout
        while lease.owned() and time.monotonic() < deadline:
            time.sleep(0.05)
        rec.event(self, key, "end", owned=lease.owned())
        return lease.owned()

    @app.task(
        shared=False, bind=True, base=LockedTask, name="basic.lose_own_lease", lock_key="lost:{key}"
    )
    def lose_own_lease(self: Any, key: Any) -> bool:
        """Deletes its own lease and returns before any heartbeat beat (lock_ttl
        long): the release is the first to find it gone."""
        holders = self.redislock_leaseset(self.redislock_name((key,), {})).keys.holders
        rec.client.delete(holders)
        return bool(self.request.redislock.owned())

    def renewer_blocking_key(args: Any, kwargs: Any) -> str:
        """``sleep:<key>``; built the first time on a thread other than a
        process's main one (in the worker main process, for the renewals),
        it blocks that thread until the test opens the key's gate (60 s at
        most)."""
        key = args[0] if args else kwargs["key"]
        blocked = f"{prefix}:renewer_blocked:{key}"
        if threading.current_thread() is not threading.main_thread() and rec.client.set(
            blocked, os.getpid(), nx=True
        ):
            deadline = time.monotonic() + 60
            while not rec.client.exists(f"{prefix}:gate:{key}") and time.monotonic() < deadline:
                time.sleep(0.05)
        return f"sleep:{key}"

    @app.task(
        shared=False,
        bind=True,
        base=LockedTask,
        name="basic.renewer_blocker",
        lock_key=renewer_blocking_key,
        lock_ttl=3,
    )
    def renewer_blocker(self: Any, key: Any, duration: float = 1.0) -> Any:
        return body(self, key, duration)

    for lib_signal in (
        signals.lock_acquired,
        signals.lock_contended,
        signals.lock_released,
        signals.lock_lost,
        signals.lock_parked,
        signals.lock_dropped,
        signals.lock_rate_limited,
        signals.lock_promoted,
    ):

        def receiver(sender: Any = None, _signal: Any = lib_signal, **kwargs: Any) -> None:
            if getattr(sender, "app", None) is not app:
                return
            kwargs.pop("signal", None)
            event = {"signal": _signal.name, "pid": os.getpid(), "t": time.time(), **kwargs}
            rec.client.rpush(f"{prefix}:signals", json.dumps(event, default=str))

        lib_signal.connect(receiver, weak=False)
    return app


def _install_faults(prefix: str, rec: Recorder) -> None:
    """Fault points of the park policy, armed by the test setting ``<prefix>:fault:<point>``
    (the first process to pass the point deletes the key and acts):

    * ``before_publish``: SIGKILL after a promotion reserved a slot, before the
      message is re-published;
    * ``after_park``: SIGKILL right after the run-time admission parked the
      task (before the message is acked);
    * ``lose_publish``: the promoted message is lost on its way (not sent);
    * ``late_publish``: it is sent only after the key's value in seconds
      (an overdue copy arriving after the sweeper re-published it);
    * ``dup_publish``: it is sent twice;
    * ``after_pause_park``: SIGKILL when ``lock_parked`` is sent with
      ``where="pause"``: ``redislock_pause`` has put the running task back at the
      head of its park, and the run has not released its lease yet.

    Copies that arrive and are dropped (``park_claim.lua`` said "drop", or
    a park script found the id already parked) are appended to
    ``<prefix>:park-drops`` as "<task id> <token> <reason>".
    """
    import threading

    from celery_redislock.core.park import Outcome, Parking, Verdict
    from celery_redislock.parking import promotion

    republish = promotion.republish

    def faulty_republish(app: Any, envelope: Any, token: int) -> None:
        if rec.client.delete(f"{prefix}:fault:before_publish"):
            os.kill(os.getpid(), signal.SIGKILL)
        if rec.client.delete(f"{prefix}:fault:lose_publish"):
            rec.client.rpush(f"{prefix}:fault-log", f"lost {envelope['headers']['id']}")
            return
        late = rec.client.get(f"{prefix}:fault:late_publish")
        if late is not None and rec.client.delete(f"{prefix}:fault:late_publish"):

            def send_late() -> None:
                republish(app, envelope, token)
                rec.client.rpush(f"{prefix}:fault-log", f"late {envelope['headers']['id']}")

            threading.Timer(float(late), send_late).start()
            return
        republish(app, envelope, token)
        if rec.client.delete(f"{prefix}:fault:dup_publish"):
            republish(app, envelope, token)
            rec.client.rpush(f"{prefix}:fault-log", f"dup {envelope['headers']['id']}")

    promotion.republish = faulty_republish

    def faulty(method: Any) -> Any:
        """``method`` (a park decision: enqueue, arrive, park at head) with the
        fault ``after_park`` and the record of duplicates."""

        def decide(self: Any, task_id: str, *args: Any, **kwargs: Any) -> Outcome:
            admission: Outcome = method(self, task_id, *args, **kwargs)
            if admission.verdict is Verdict.PARKED and rec.client.delete(
                f"{prefix}:fault:after_park"
            ):
                os.kill(os.getpid(), signal.SIGKILL)
            if admission.verdict is Verdict.DUPLICATE:
                rec.client.rpush(f"{prefix}:park-drops", f"{task_id} dup {admission.reason!r}")
            return admission

        return decide

    Parking.enqueue = faulty(Parking.enqueue)  # type: ignore[method-assign]
    Parking.arrive = faulty(Parking.arrive)  # type: ignore[method-assign]
    Parking.park_at_head = faulty(Parking.park_at_head)  # type: ignore[method-assign]

    claim = Parking.claim

    def recording_claim(self: Any, task_id: str, token: str, *args: Any) -> Outcome:
        admission = claim(self, task_id, token, *args)
        if admission.verdict is Verdict.DROP:
            rec.client.rpush(f"{prefix}:park-drops", f"{task_id} {token} {admission.reason!r}")
        return admission

    Parking.claim = recording_claim  # type: ignore[method-assign, assignment]

    def kill_after_pause_park(sender: Any = None, where: str = "", **_: Any) -> None:
        # Connected after create_app's recording receivers: the signal is recorded first.
        if where == "pause" and rec.client.delete(f"{prefix}:fault:after_pause_park"):
            os.kill(os.getpid(), signal.SIGKILL)

    signals.lock_parked.connect(kill_after_pause_park, weak=False)


if os.environ.get(ENV_PREFIX + "PREFIX"):
    app = create_app(config_from_env())
    _install_faults(app.conf.redislock_prefix, app.recorder)  # type: ignore[attr-defined]
    write_pid_when_ready(ENV_PREFIX + "READY_FILE")
