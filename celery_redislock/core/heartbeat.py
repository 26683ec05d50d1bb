"""One renewer per process that keeps every held lease alive.

Every ``min(ttl) / 3`` seconds it renews **all** leases the process holds,
one ``refresh.lua`` call per Redis client (on a Redis Cluster, one pipeline
grouped by node), not a thread or a request per lease.

Guarantees:

* a lease found gone (expired, deleted, Redis restarted or failed over
  without it) is marked lost at that beat, so within one interval;
* a lease whose renewal cannot be confirmed (Redis down, paused, slow) is
  marked lost when its local deadline passes (see :class:`~.lease.Lease`),
  even while a renewal request is still hanging: the requests run on a
  separate I/O thread;
* Redis errors are logged and retried at the next beat; the renewer keeps going;
* a lease whose lock object was garbage-collected while held (see
  :attr:`~.lease.Lease.abandoned`) is not renewed: at the next beat it is
  marked lost with a warning naming the lock, dropped, and expires in Redis
  within its ttl (it is not released: code that kept the fencing token may
  still be finishing);
* fork-safe: a forked child starts with no leases and no thread, so it never
  renews its parent's leases;
* :meth:`Heartbeat.stop` ends the thread (also run at interpreter exit).

Cost when idle: after the last lease goes, the thread keeps waking at its
last pace for ``IDLE_TICKING`` seconds, so that a process acquiring and
releasing in a loop does not have to wake it at every acquire (a thread
switch per acquire was a visible share of an uncontended cycle); then it
sleeps until a lease is added.

Not guaranteed: that a lease survives a pause of *this* process (GC, SIGSTOP)
longer than its TTL.  The holder learns it lost the lease, but may already
have acted; only a fencing token checked by the resource makes that safe.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError,
    TimeoutError,
    TryAgainError,
)

from .keys import held_index
from .lease import Lease
from .scripts import REFRESH

__all__ = ["HEARTBEAT", "Heartbeat", "refresh_leases"]

log = logging.getLogger("celery_redislock")

BATCH_SIZE = 500
MIN_INTERVAL = 0.005
IDLE_TICKING = 60.0  # seconds an idle renewer keeps its pace before sleeping until add()


def is_cluster(client: Any) -> bool:
    return hasattr(client, "get_node_from_key")


def refresh_leases(client: Any, leases: list[Lease]) -> list[int]:
    """Renew ``leases`` (all on ``client``) in as few round trips as possible.

    Returns, per lease, the new remaining lease in ms, or 0 if it was gone.
    """
    ttls = [lease.ttl for lease in leases]
    if is_cluster(client):
        return _refresh_on_cluster(client, leases, ttls)
    results = [0] * len(leases)
    # One batch kind per index (refresh.lua lists every lease of a call in
    # the index it is given, or none): the held index, if any, is per prefix.
    batches: dict[str | None, list[int]] = {}
    for i, lease in enumerate(leases):
        batches.setdefault(
            held_index(lease.keys.prefix) if lease.keys.indexed else None, []
        ).append(i)
    for index, positions in batches.items():
        for start in range(0, len(positions), BATCH_SIZE):
            chunk = positions[start : start + BATCH_SIZE]
            keys: list[str] = []
            args: list[Any] = []
            for i in chunk:
                keys += [leases[i].keys.holders, leases[i].keys.info]
                args += [leases[i].owner, _ms(ttls[i])]
            replies = REFRESH(client, keys + ([index] if index else []), args)
            for i, reply in zip(chunk, replies, strict=True):
                results[i] = leases[i].note_renewal(int(reply))
    return results


# Replies meaning "ask elsewhere / later" (slot moved by a failover or resharding);
# MovedError is an AskError.
_REDIRECTED = (AskError, TryAgainError, ClusterDownError)


def _node_name(client: Any, lease: Lease) -> str:
    """The primary of the lease's slot, from the client's cached slot map ("" if unknown)."""
    try:
        return str(client.get_node_from_key(lease.keys.holders).name)
    except Exception:  # slot map being rebuilt: refresh_leases routes it later
        return ""


def _refresh_on_cluster(client: Any, leases: list[Lease], ttls: list[float]) -> list[int]:
    """One pipeline of per-lease ``refresh.lua`` calls per primary.

    A script call may only touch one slot, so leases cannot share a call as
    on a single server; redis-py's cluster pipeline refuses EVALSHA, so each
    node's calls go through a plain pipeline on that node's connection (one
    round trip per node).  A node that lacks the library or script (new or
    failed-over primary) gets it and that node's pipeline is sent again, as it
    is where functions were refused (``LuaScript.pipelined``; renewing twice
    is harmless); a lease whose slot moved (MOVED/ASK), or whose node cannot be
    reached, is renewed through the cluster client, which follows redirections
    and rediscovers the cluster after a failover.
    """
    by_node: dict[str, list[int]] = {}
    for i, lease in enumerate(leases):
        by_node.setdefault(_node_name(client, lease), []).append(i)
    results = [0] * len(leases)
    for name, indexes in by_node.items():
        node = client.get_node(node_name=name) if name else None
        try:
            if node is None:
                raise ConnectionError("no known primary for these slots")
            replies = _pipeline_on(client.get_redis_connection(node), leases, ttls, indexes)
        except (ConnectionError, TimeoutError):
            # The node is gone (failover?): the cluster client refreshes its
            # slot map and retries; if that fails too, the error propagates.
            replies = [
                REFRESH(client, _refresh_keys(leases[i]), [leases[i].owner, _ms(ttls[i])])
                for i in indexes
            ]
        for i, reply in zip(indexes, replies, strict=True):
            if isinstance(reply, Exception):
                if not isinstance(reply, _REDIRECTED):
                    raise reply
                reply = REFRESH(client, _refresh_keys(leases[i]), [leases[i].owner, _ms(ttls[i])])
            results[i] = leases[i].note_renewal(int(reply[0]))
    return results


def _pipeline_on(
    node_client: Any, leases: list[Lease], ttls: list[float], indexes: list[int]
) -> Any:
    calls = [(_refresh_keys(leases[i]), [leases[i].owner, _ms(ttls[i])]) for i in indexes]
    return REFRESH.pipelined(node_client, calls)


def _refresh_keys(lease: Lease) -> list[str]:
    return [lease.keys.holders, lease.keys.info]


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class Heartbeat:
    """The per-process renewer.  Use the module-level :data:`HEARTBEAT`."""

    #: called (without arguments, holding no lock) after a lease is added or
    #: discarded; liveness.Recorder states the holdings when it changes
    on_change: Callable[[], None] | None = None

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._leases: dict[int, Lease] = {}
        self._thread: threading.Thread | None = None
        self._io: ThreadPoolExecutor | None = None
        self._stopping = False
        self._scheduled_ttl = math.inf  # shortest ttl the loop's current wait accounts for
        self.beats = 0

    # -- registration -------------------------------------------------------

    def add(self, lease: Lease) -> None:
        with self._cond:
            self._leases[id(lease)] = lease
            if self._thread is None or not self._thread.is_alive():
                self._stopping = False
                self._thread = threading.Thread(
                    target=self._run, name="redislock-heartbeat", daemon=True
                )
                self._thread.start()
            if lease.ttl < self._scheduled_ttl:
                # The loop must beat sooner than it planned.  Otherwise it is
                # not woken: it beats within scheduled_ttl / 3 <= lease.ttl / 3.
                self._scheduled_ttl = lease.ttl
                self._cond.notify_all()
        if self.on_change is not None:
            self.on_change()

    def discard(self, lease: Lease) -> None:
        with self._cond:
            self._leases.pop(id(lease), None)
        if self.on_change is not None:
            self.on_change()

    def leases(self) -> list[Lease]:
        with self._cond:
            return list(self._leases.values())

    def stop(self, timeout: float = 5.0) -> None:
        """Stop renewing (the leases then expire by their TTL) and end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread, io = self._thread, self._io
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if io is not None:
            io.shutdown(wait=False, cancel_futures=True)
        with self._cond:
            self._thread = None
            self._io = None

    # -- the loop -----------------------------------------------------------

    def _run(self) -> None:
        last_beat = idle_since = time.monotonic()
        while True:
            with self._cond:
                while not self._stopping:
                    now = time.monotonic()
                    if self._leases:
                        self._scheduled_ttl = min(lease.ttl for lease in self._leases.values())
                        idle_since = math.inf
                    else:
                        # Idle: keep the last pace for IDLE_TICKING seconds, so that
                        # a holder acquiring and releasing in a loop need not wake
                        # this thread at every add() (see add()); then sleep.
                        idle_since = min(idle_since, now)
                        if now - idle_since >= IDLE_TICKING:
                            self._scheduled_ttl = math.inf
                    if self._scheduled_ttl == math.inf:
                        self._cond.wait()
                        # Woken by add(): that counts as activity, even if the
                        # lease is gone again by the time this thread runs.
                        last_beat = idle_since = time.monotonic()
                        continue
                    wait = last_beat + max(MIN_INTERVAL, self._scheduled_ttl / 3) - now
                    if wait > 0:
                        self._cond.wait(wait)
                    elif self._leases:
                        break
                    else:
                        last_beat = now  # an idle tick: nothing to renew
                if self._stopping:
                    return
                leases = list(self._leases.values())
            leases = self._drop_abandoned(leases)
            last_beat = time.monotonic()
            self._beat(leases)
            self._expire_overdue(leases)
            self.beats += 1

    def _drop_abandoned(self, leases: list[Lease]) -> list[Lease]:
        """The leases still wanted; abandoned ones are reported and dropped."""
        kept = []
        for lease in leases:
            if not lease.abandoned:
                kept.append(lease)
                continue
            self.discard(lease)
            lease.mark_lost(
                "its lock object was garbage-collected while held (release() was never "
                f"called): no longer renewed, it expires within its ttl ({lease.ttl:g} s)"
            )
        return kept

    def _beat(self, leases: list[Lease]) -> None:
        if self._io is None:
            self._io = ThreadPoolExecutor(1, thread_name_prefix="redislock-heartbeat-io")
        future: Future[None] = self._io.submit(self._renew, leases)
        while True:
            now = time.monotonic()
            pending = [at for lease in leases if (at := lease.report_at(now)) is not None]
            timeout = max(0.0, min(pending) - now) if pending else None
            try:
                future.result(timeout=timeout)
                return
            except FutureTimeout:
                self._expire_overdue(leases)
            except Exception as exc:
                log.warning("lease renewal failed, retrying at the next beat: %r", exc)
                return

    def _renew(self, leases: list[Lease]) -> None:
        groups: dict[tuple[int, str], list[Lease]] = {}
        for lease in leases:
            node = _node_name(lease.client, lease) if is_cluster(lease.client) else ""
            groups.setdefault((id(lease.client), node), []).append(lease)
        failure: Exception | None = None
        for group in groups.values():
            sent_at = time.monotonic()
            try:
                remaining = refresh_leases(group[0].client, group)
            except Exception as exc:  # one server (or cluster node) down: renew the others
                failure = exc
                continue
            for lease, remaining_ms in zip(group, remaining, strict=True):
                if remaining_ms > 0:
                    lease.confirm(sent_at)
                elif lease.mark_lost("gone at renewal: expired, deleted, or Redis lost its data"):
                    self.discard(lease)
        if failure is not None:
            raise failure

    def _expire_overdue(self, leases: Iterable[Lease]) -> None:
        now = time.monotonic()
        for lease in leases:
            at = lease.report_at(now)  # past valid_until: after a grace to confirm a fresh renewal
            if (
                at is not None
                and now >= at
                and now >= lease.valid_until
                and lease.mark_lost(
                    "renewal not confirmed within its ttl (Redis unreachable, paused or slow)"
                )
            ):
                self.discard(lease)


HEARTBEAT = Heartbeat()
os.register_at_fork(after_in_child=HEARTBEAT._reset)
atexit.register(HEARTBEAT.stop)
