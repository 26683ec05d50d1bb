"""Which holders are provably dead: leases given back before their TTL, safely.

A lease normally outlives a holder that died by up to its TTL: nothing else
can tell a dead holder from a slow or cut-off one.  One case can be told
apart for certain: a process on **this** machine, in **this** pid namespace,
that no longer exists.  So:

* a process that holds leases (:meth:`Recorder.enable`: the Celery layer
  enables it in worker processes) states what it holds in Redis, at most
  once per :data:`STATEMENT_INTERVAL` while it changes and once per
  ``ttl / 3`` while it holds anything: its identity (pid and start time, in
  its *process space*: machine boot id and pid namespace) and, per client
  and prefix, the names and owner ids of its leases;
* :func:`dead_processes` lists the processes of the caller's own process
  space that have ended (:func:`process_gone`: the pid is gone, is a zombie,
  or now belongs to a process with another start time).  Their leases can be
  given back (:func:`forget` then drops the statement).

Guaranteed: a holder is declared dead only by the operating system of the
machine it ran on: a paused process (SIGSTOP, GC), a process whose parent
(the worker's main process) is paused or dead, and a process cut off from
Redis all still exist, so their leases are kept until their TTL, as before.
Pid reuse cannot fool it (the start time is part of the identity).
Not guaranteed: early release where no process of the same space looks
(a worker restarted in a new container with its own pid namespace, another
machine): there the TTL frees the lease.  A lease taken less than
:data:`STATEMENT_INTERVAL` before its holder died may not be stated yet:
its TTL frees it.  Only Linux (``/proc``) has a process space; elsewhere
nothing is stated and nothing is declared dead.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .heartbeat import HEARTBEAT
from .keys import LiveKeys
from .lease import Lease
from .scripts import LIVE_FORGET, LIVE_LIST, LIVE_REGISTER, text

__all__ = [
    "RECORDER",
    "STATEMENT_INTERVAL",
    "DeadProcess",
    "Recorder",
    "dead_processes",
    "forget",
    "holder_fields",
    "identity",
    "last_statements",
    "process_gone",
    "process_space",
]

log = logging.getLogger("celery_redislock")

STATEMENT_INTERVAL = 0.5  # seconds between statements while the holdings change


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def process_space() -> str | None:
    """This machine's boot id and this process's pid namespace, or None off Linux."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return None if boot is None else f"{boot}.{namespace}"


def start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or None if there is none."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19]  # field 22 of proc(5), counted from field 3


def identity(pid: int | None = None) -> str | None:
    """``"<pid>.<start time>"`` of a live process (this one by default), or None."""
    pid = os.getpid() if pid is None else pid
    started = start_time(pid)
    return None if started is None else f"{pid}.{started}"


_STAMP: tuple[int, bool, str] = (0, False, "")


def holder_fields() -> str:
    """The holder-meta JSON fields naming this process: ``"pid": <pid>`` and, on
    Linux, ``"proc": "<space>/<pid>.<start time>"`` (for ``status``, see
    :func:`last_statements`), with ``"states": true`` when this process states
    its holdings (:data:`RECORDER` enabled: a worker process), so that a
    holder that stopped stating can be told from one that never does.
    Cached per pid (it is read at every acquire)."""
    global _STAMP
    pid = os.getpid()
    enabled = RECORDER._enabled
    if _STAMP[0] != pid or _STAMP[1] != enabled:
        space, me = process_space(), identity(pid)
        proc = f', "proc": {json.dumps(f"{space}/{me}")}' if space and me else ""
        states = ', "states": true' if proc and enabled else ""
        _STAMP = (pid, enabled, f'"pid": {pid}{proc}{states}')
    return _STAMP[2]


def last_statements(client: Any, prefix: str, procs: Iterable[str]) -> dict[str, float]:
    """Redis time (s) of the last statement of each holder process in ``procs``
    (holder metas' ``"proc"``) that has one; one call per process space.  A
    process without one holds nothing by its own account, or died and its
    record expired, or is not a worker process (they state nothing)."""
    out: dict[str, float] = {}
    by_space: dict[str, set[str]] = {}
    for proc in procs:
        space, _, process = proc.rpartition("/")
        by_space.setdefault(space, set()).add(process)
    for space, wanted in by_space.items():
        for process, at, _ in _statements(client, prefix, space):
            if process in wanted:
                out[f"{space}/{process}"] = at
    return out


def _statements(client: Any, prefix: str, space: str) -> list[tuple[str, float, str]]:
    """(process, Redis time (s) of its last statement, its record) per process of ``space``."""
    keys = LiveKeys(prefix, space)
    reply = LIVE_LIST(client, [keys.index], [keys.record("")])
    return [
        (text(reply[i]), float(reply[i + 1]) / 1000, text(reply[i + 2]))
        for i in range(0, len(reply), 3)
    ]


@dataclass(frozen=True)
class DeadProcess:
    """A process of this space that stated holdings and no longer exists."""

    process: str  # "<pid>.<start time>"
    holdings: dict[str, list[str]]  # lock name -> owner ids it held


def dead_processes(client: Any, prefix: str) -> list[DeadProcess]:
    """The processes of this machine's process space, with statements under
    ``prefix`` on ``client``, that are provably dead (see the module docstring)."""
    space = process_space()
    if space is None:
        return []
    return [
        DeadProcess(process, json.loads(record) if record else {})
        for process, _, record in _statements(client, prefix, space)
        if _gone(process)
    ]


def _gone(process: str) -> bool:
    pid, _, started = process.partition(".")
    return process_gone(int(pid), started)


def process_gone(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` (that started at ``started``, if given) has ended:
    no process has that pid, the one that has it is a zombie (its body cannot
    run any more), or it started at another time (the pid was reused).  A
    process this one cannot see (``/proc`` mounted with ``hidepid``, another
    user) counts as alive: only what the kernel answers proves a death."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        stat = None
    except OSError:
        return False
    if stat is not None:
        fields = stat[stat.rindex(b")") + 2 :].split()
        state, start = fields[0], fields[19].decode()
        return state in (b"Z", b"X") or (started is not None and start != started)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, under another user
    return False


def forget(client: Any, prefix: str, process: str) -> None:
    """Drop a dead process's statement (after its leases were given back)."""
    space = process_space()
    if space is not None:
        keys = LiveKeys(prefix, space)
        LIVE_FORGET(client, [keys.index, keys.record(process)], [process])


class Recorder:
    """States this process's holdings (see the module docstring); one per process."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._enabled = False
        self._stated: dict[tuple[object, str], str] = {}  # (Redis, prefix) -> what was stated
        self._clients: dict[tuple[object, str], Any] = {}

    def enable(self) -> None:
        """State this process's holdings from now on (a no-op off Linux)."""
        if self._enabled or process_space() is None:
            return
        self._enabled = True
        HEARTBEAT.on_change = self._wake.set
        self._thread = threading.Thread(target=self._run, name="redislock-liveness", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        space, me = process_space(), identity()
        assert space is not None and me is not None
        while True:
            leases = HEARTBEAT.leases()
            interval = min((lease.ttl / 3 for lease in leases), default=None)
            self._wake.wait(interval)
            self._wake.clear()
            try:
                self.state(space, me, HEARTBEAT.leases())
            except Exception as exc:  # the TTL still frees what a dead holder held
                log.debug("could not state this process's leases: %r", exc)
            time.sleep(STATEMENT_INTERVAL)

    def state(self, space: str, me: str, leases: Iterable[Lease]) -> None:
        """Write what this process holds, per client and prefix (one script call each)."""
        groups: dict[tuple[object, str], dict[str, list[str]]] = {}
        ttls: dict[tuple[object, str], float] = {}
        for lease in leases:
            # One statement per Redis and prefix: two clients of one Redis
            # write the same record, so they must state together.
            group = (_server_of(lease.client), lease.keys.prefix)
            self._clients[group] = lease.client
            groups.setdefault(group, {}).setdefault(lease.keys.name, []).append(lease.owner)
            ttls[group] = max(ttls.get(group, 0.0), lease.ttl)
        for group in set(self._stated) | set(groups):
            holdings = json.dumps(groups[group], sort_keys=True) if group in groups else ""
            if not holdings and not self._stated.get(group):
                continue
            client, prefix = self._clients[group], group[1]
            keys = LiveKeys(prefix, space)
            # Restated every ttl/3 while it holds anything, so it names the
            # leases of a dead holder for most of their remaining TTL.
            ttl_ms = int(ttls.get(group, 0.0) * 1000) + 1000
            LIVE_REGISTER(client, [keys.index, keys.record(me)], [me, holdings, ttl_ms])
            self._stated[group] = holdings


def _server_of(client: Any) -> object:
    """Which Redis ``client`` talks to (a Sentinel service, host, port, socket
    path, db), or the client itself when that cannot be read (a Cluster client)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return id(client)
    where = (kwargs.get("host"), kwargs.get("port"), kwargs.get("path"), kwargs.get("db"))
    return (getattr(pool, "service_name", None), *where)  # a Sentinel pool: its service


RECORDER = Recorder()
os.register_at_fork(after_in_child=RECORDER._reset)
