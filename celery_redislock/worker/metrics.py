"""Prometheus metrics of a worker: what its guarded tasks did, counted from the library's signals.

Set ``redislock_metrics_port`` (say 9808) and install the extra
``celery-redislock[metrics]`` (prometheus-client): the worker's main process
then serves ``http://<redislock_metrics_host>:<port>/metrics``.  Labels are
``task`` (the task name) and ``kind`` (``lock``, ``semaphore``, ``rate``),
plus ``outcome`` / ``reason`` where named; never the lock key, so an account
id never becomes a series.  The Redis-side gauges (parked work, overdue
promotions) are served by ``celery redislock exporter`` (:mod:`celery_redislock.admin.gauges`),
once for the whole deployment.

======================================  ==============================================
``redislock_acquired_total``            runs that took their lock, slot or rate unit
                                        (once per run: listed limits not counted)
``redislock_contended_total{outcome}``  runs or calls that met a held key: ``outcome``
                                        is ``lock_contended``'s policy (``skip``,
                                        ``retry``, ``wait`` (timed out), ``raise``, ``dedupe``,
                                        ``redelivered``; ``park`` / ``keep_latest``
                                        for a run a listed limit sent back), ``park``
                                        (parked) or ``rate`` (held back by the key's
                                        rate or a pause)
``redislock_released_total{reason}``    runs' own leases given back (``finished``,
                                        ``retry``, ``paused``, ``limit``, ``worker
                                        lost``, ``terminated``, ``time limit``)
``redislock_reclaimed_total``           of those, freed by the main process after
                                        its child died
``redislock_lost_total``                leases found gone while their run went on
                                        (listed limits' too)
``redislock_promoted_total``            parked tasks published to run
``redislock_dropped_total{reason}``     parked tasks that never run (``expired``,
                                        ``revoked``, ``discarded``, ``unclaimed``,
                                        ``superseded``)
``redislock_wait_seconds``              histogram: from the call (``delay`` /
                                        ``apply_async`` stamps it) to the lease,
                                        time parked included; for a message sent
                                        otherwise (``send_task``, beat) the time
                                        its run waited for the lease
``redislock_hold_seconds``              histogram: from the lease to its release by
                                        the run itself
======================================  ==============================================

Guaranteed: one scrape sums every process of the worker.  Before it forks
its pool, the main process points prometheus-client's multiprocess mode at
a directory of its own (made at worker start, removed at shutdown); every
process writes its values to a file there named by its pid, and the
endpoint sums the files.  A child that dies or is replaced leaves its file,
so its counts are neither lost nor doubled.  The histograms count every
start (``wait``) and every release by a run (``hold``).

Not guaranteed: counters restart at zero with the worker, as Prometheus
expects of a restarted target; ``wait`` compares the caller's clock with
the worker's (skew shows up in it).  Two workers on one host need two ports
(a port in use is one ERROR line; the worker runs on without metrics).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from typing import Any

from .. import signals
from ..enqueue.options import HEADER_SENT_AT, header

__all__ = ["WorkerMetrics", "start", "stop"]

log = logging.getLogger("celery_redislock")

_DEAD_CHILD = ("worker lost", "terminated", "time limit")
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class WorkerMetrics:
    """The metrics of one worker and the receivers that feed them."""

    def __init__(self, directory: str) -> None:
        from prometheus_client import Counter, Histogram, values

        self.directory = directory
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]

        def counter(name: str, doc: str, *extra: str) -> Any:
            return Counter(name, doc, ["task", "kind", *extra], registry=None)

        self.acquired = counter("redislock_acquired_total", "runs that took their lease")
        self.contended = counter("redislock_contended_total", "runs that met a held key", "outcome")
        self.released = counter("redislock_released_total", "leases given back", "reason")
        self.reclaimed = counter("redislock_reclaimed_total", "leases freed after a dead child")
        self.lost = counter("redislock_lost_total", "leases lost while running")
        self.promoted = counter("redislock_promoted_total", "parked tasks published to run")
        self.dropped = counter("redislock_dropped_total", "parked tasks that never run", "reason")
        self.wait = Histogram(
            "redislock_wait_seconds",
            "call to lease, parked time included",
            ["task", "kind"],
            buckets=_BUCKETS,
            registry=None,
        )
        self.hold = Histogram(
            "redislock_hold_seconds",
            "lease to release by the run",
            ["task", "kind"],
            buckets=_BUCKETS,
            registry=None,
        )
        self._held: dict[tuple[str, str], float] = {}
        # The labelled children, by labels: prometheus-client's labels() takes a
        # lock and builds its key on every call, a visible share of a task's cost.
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def connect(self) -> None:
        for signal, receiver in (
            (signals.lock_acquired, self._acquired),
            (signals.lock_contended, self._contended),
            (signals.lock_parked, self._parked),
            (signals.lock_rate_limited, self._rate_limited),
            (signals.lock_released, self._released),
            (signals.lock_lost, self._lost),
            (signals.lock_promoted, self._promoted),
            (signals.lock_dropped, self._dropped),
        ):
            signal.connect(receiver, weak=False)

    def _acquired(self, sender: Any = None, **kw: Any) -> None:
        if kw.get("listed"):
            return  # a run counts once: its own key's lease
        task, kind = _labels(sender, kw)
        self._child(self.acquired, task, kind).inc()
        sent = _sent_at(sender)
        self._child(self.wait, task, kind).observe(
            max(time.time() - sent, 0.0) if sent is not None else float(kw.get("waited") or 0.0)
        )
        # dict operations are atomic under the GIL: no lock for the heartbeat thread
        self._held[(str(kw.get("task_id")), str(kw.get("name")))] = time.monotonic()

    def _contended(self, sender: Any = None, **kw: Any) -> None:
        self._child(self.contended, *_labels(sender, kw), str(kw.get("policy"))).inc()

    def _parked(self, sender: Any = None, **kw: Any) -> None:
        if kw.get("where") == "limit":
            return  # sent back by a listed limit: counted by its lock_contended
        self._child(self.contended, *_labels(sender, kw), "park").inc()

    def _rate_limited(self, sender: Any = None, **kw: Any) -> None:
        self._child(self.contended, *_labels(sender, kw), "rate").inc()

    def _released(self, sender: Any = None, **kw: Any) -> None:
        if kw.get("listed"):
            return  # a run counts once: its own key's lease
        task, kind = _labels(sender, kw)
        reason = str(kw.get("reason"))
        self._child(self.released, task, kind, reason).inc()
        if reason in _DEAD_CHILD:
            self._child(self.reclaimed, task, kind).inc()
        since = self._held.pop((str(kw.get("task_id")), str(kw.get("name"))), None)
        if since is not None:
            self._child(self.hold, task, kind).observe(time.monotonic() - since)

    def _lost(self, sender: Any = None, **kw: Any) -> None:
        self._child(self.lost, *_labels(sender, kw)).inc()

    def _promoted(self, sender: Any = None, **kw: Any) -> None:
        self._child(self.promoted, *_labels(sender, kw)).inc()

    def _dropped(self, sender: Any = None, **kw: Any) -> None:
        self._child(self.dropped, *_labels(sender, kw), str(kw.get("reason"))).inc()


def _labels(sender: Any, kw: dict[str, Any]) -> tuple[str, str]:
    return str(getattr(sender, "name", None) or kw.get("task") or "unknown"), str(
        kw.get("kind") or "unknown"
    )


def _sent_at(task: Any) -> float | None:
    """When the running task was called (``HEADER_SENT_AT``), if stamped."""
    request = getattr(task, "request", None)
    raw = header(request, HEADER_SENT_AT) if request is not None else None
    try:
        return None if raw is None else float(raw)
    except (TypeError, ValueError):
        return None


_state: dict[str, Any] = {}


def start(port: int, host: str) -> WorkerMetrics:
    """In the worker's main process, before its pool forks: the metrics, their
    receivers, and the endpoint (``SystemExit`` in one line without
    prometheus-client; an ERROR line if the port is taken)."""
    try:
        from prometheus_client import CollectorRegistry, multiprocess, start_http_server
    except ImportError:
        raise SystemExit(
            "celery-redislock: redislock_metrics_port needs prometheus-client: "
            "pip install 'celery-redislock[metrics]'"
        ) from None
    metrics = WorkerMetrics(tempfile.mkdtemp(prefix="redislock-metrics-"))
    metrics.connect()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=metrics.directory)  # type: ignore[no-untyped-call]
    try:
        start_http_server(port, addr=host, registry=registry)
        log.info("celery-redislock metrics on http://%s:%d/metrics", host, port)
    except OSError as exc:
        log.error(
            "celery-redislock: cannot serve metrics on %s:%d (%s); no metrics from this worker",
            host,
            port,
            exc,
        )
    _state["metrics"] = metrics
    return metrics


def stop() -> None:
    """At worker shutdown: remove the directory of the process files."""
    metrics = _state.pop("metrics", None)
    if metrics is not None:
        with contextlib.suppress(OSError):
            shutil.rmtree(metrics.directory)
