"""The client fleet and the fault injector.

Faults are drawn from one ``random.Random(seed)``: which kind, which victim
(by rank among the current holders), how long a pause lasts and the gap to
the next fault.  With the same seed the same schedule is drawn; what the
clients happen to be doing when a fault lands depends on timing, so a replay
reproduces the schedule, not every interleaving.

Each fault is recorded as a ``fault`` event with ``at = "start"`` just
before it is injected and ``at = "end"`` once it is over (process reaped,
server resumed or answering again), so the window between the two contains
the fault.  Kinds (``UNSAFE`` ones may legitimately let two holders overlap;
only fencing protects the resource then):

``holder_kill``    SIGKILL a client holding a lock or slot; then wait until
                   Redis shows its lease gone (``freed``) and start a
                   replacement client
``holder_pause``   SIGSTOP a holder for 1.5-2 TTL, then SIGCONT
``redis_pause``    SIGSTOP redis-server for 1.3-1.8 TTL, then SIGCONT
``redis_restart``  SIGKILL redis-server and start it empty on the same port
``client_kill``    CLIENT KILL of every client connection, or of one holder's
``lease_delete``   DEL a held lock's holder keys (an operator or eviction)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from random import Random
from typing import Any

from celery_redislock.core.keys import LeaseKeys
from celery_redislock.core.leaseset import LeaseSet
from celery_redislock.testing.servers import RedisServer

from .history import HOLDING_KEY, Recorder

# KEYS[1] holders, KEYS[2] info of a lease set; ARGV[1] the victim's owner.
# Deletes both (an operator's or an eviction's DEL) if the owner holds there.
_DELETE_IF_HELD = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return redis.call('DEL', KEYS[1], KEYS[2]) end
return 0
"""

FAULTS = (
    "holder_kill",
    "holder_pause",
    "redis_pause",
    "redis_restart",
    "client_kill",
    "lease_delete",
)
UNSAFE = frozenset({"holder_pause", "redis_pause", "redis_restart", "lease_delete"})
REPO = Path(__file__).resolve().parents[2]


class Fleet:
    """The client processes (``python -m tests.faults.client``), each in its own session."""

    def __init__(self, base_config: dict[str, Any], logdir: Path, seed: int) -> None:
        self.base = base_config
        self.logdir = logdir
        self.rng = Random(seed)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.skews: dict[str, float] = {}
        self.spawned = 0

    def spawn(self, skew: float = 0.0) -> str:
        cid = str(self.spawned)
        self.spawned += 1
        config = {**self.base, "id": cid, "seed": self.rng.randrange(2**32), "skew": skew}
        with open(self.logdir / f"client-{cid}.log", "wb") as log:
            self.procs[cid] = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.client", json.dumps(config)],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.skews[cid] = skew
        return cid

    def kill(self, cid: str) -> None:
        proc = self.procs.pop(cid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def signal(self, cid: str, sig: signal.Signals) -> None:
        os.killpg(self.procs[cid].pid, sig)

    def wait_all(self, timeout: float) -> list[str]:
        """Wait for every client to exit; kill and return those that did not."""
        deadline = time.monotonic() + timeout
        stuck = []
        for cid, proc in list(self.procs.items()):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stuck.append(cid)
        for cid in stuck:
            self.kill(cid)
        return stuck

    def kill_all(self) -> None:
        for cid in list(self.procs):
            proc = self.procs[cid]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGCONT)
                    self.kill(cid)
                except ProcessLookupError:
                    pass
            self.procs.pop(cid, None)


class Injector:
    def __init__(
        self,
        server: RedisServer,
        fleet: Fleet,
        rec: Recorder,
        test_client: Any,
        seed: int,
        settings: Any,
    ) -> None:
        self.server = server
        self.fleet = fleet
        self.rec = rec
        self.test = test_client
        self.rng = Random(seed)
        self.s = settings
        self.injected: dict[str, int] = dict.fromkeys(FAULTS, 0)
        self._fid = 0

    # -- schedule -----------------------------------------------------------

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        kinds = list(self.s.faults)
        self.rng.shuffle(kinds)  # every kind at least once, then at random
        while time.monotonic() < deadline:
            time.sleep(self.rng.uniform(0.2, 1.0) * self.s.ttl)
            if not self.s.faults:
                continue
            kind = kinds.pop() if kinds else self.rng.choice(self.s.faults)
            if not getattr(self, kind)():
                kinds.append(kind)  # no victim right now: try again later

    def _holders(self, locks_only: bool = False) -> list[tuple[str, dict[str, Any]]]:
        raw = self.rec.client.hgetall(HOLDING_KEY)
        found = sorted(
            (cid.decode(), json.loads(info))
            for cid, info in raw.items()
            if cid.decode() in self.fleet.procs
        )
        return [(cid, h) for cid, h in found if h["limit"] == 1 or not locks_only]

    def _pick(self, locks_only: bool = False) -> tuple[str, dict[str, Any]] | None:
        holders = self._holders(locks_only)
        return self.rng.choice(holders) if holders else None

    def _mark(self, kind: str, at: str, **fields: Any) -> float:
        if at == "start":
            self._fid += 1
            self.injected[kind] += 1
        return self.rec("fault", kind=kind, at=at, fid=self._fid, **fields)

    # -- the faults ---------------------------------------------------------

    def holder_kill(self) -> bool:
        picked = self._pick()
        if picked is None:
            return False
        cid, held = picked
        fields = {"victim": cid, "r": held["r"], "tok": held["tok"], "owner": held["owner"]}
        self._mark("holder_kill", "start", **fields)
        self.fleet.kill(cid)
        killed_at = self._mark("holder_kill", "end", **fields)
        self.rec.client.hdel(HOLDING_KEY, cid)
        view = LeaseSet(self.test, held["r"], held["limit"], prefix=self.s.prefix)
        deadline = time.monotonic() + 3 * self.s.ttl + 10
        freed = False
        while time.monotonic() < deadline:
            try:
                if all(h.owner != held["owner"] for h in view.holders()):
                    freed = True
                    break
            except Exception:
                pass  # a concurrent client kill; ask again
            time.sleep(0.02)
        self.rec(
            "freed", fid=self._fid, r=held["r"], owner=held["owner"], ok=freed, killed_at=killed_at
        )
        self.fleet.spawn(self.fleet.skews[cid])
        return True

    def holder_pause(self) -> bool:
        picked = self._pick()
        if picked is None:
            return False
        cid, held = picked
        fields = {"victim": cid, "r": held["r"], "tok": held["tok"], "owner": held["owner"]}
        length = self.rng.uniform(1.5, 2.0) * self.s.ttl
        self._mark("holder_pause", "start", **fields)
        self.fleet.signal(cid, signal.SIGSTOP)
        time.sleep(length)
        self.fleet.signal(cid, signal.SIGCONT)
        self._mark("holder_pause", "end", **fields)
        return True

    def redis_pause(self) -> bool:
        length = self.rng.uniform(1.3, 1.8) * self.s.ttl
        self._mark("redis_pause", "start")
        self.server.pause()
        time.sleep(length)
        self.server.resume()
        self._mark("redis_pause", "end")
        return True

    def redis_restart(self) -> bool:
        # Marked once the server is dead, when the data is lost: a holder that
        # released in the moment between a mark made first and the kill did so
        # on the old server, and must not count as one that held across it.
        self.server.kill()
        self._mark("redis_restart", "start")
        self.server.start()
        self._mark("redis_restart", "end")
        return True

    def client_kill(self) -> bool:
        one = self.rng.random() < 0.5
        picked = self._pick() if one else None
        if picked is None:
            self._mark("client_kill", "start", scope="all")
            self.test.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            self._mark("client_kill", "end", scope="all")
            return True
        cid, held = picked
        self._mark("client_kill", "start", scope="one", victim=cid, r=held["r"], tok=held["tok"])
        for entry in self.test.client_list():
            if entry.get("name") == f"fault-{cid}":
                self.test.execute_command("CLIENT", "KILL", "ID", entry["id"])
        self._mark("client_kill", "end", scope="one", victim=cid, r=held["r"], tok=held["tok"])
        return True

    def lease_delete(self) -> bool:
        picked = self._pick(locks_only=True)
        if picked is None:
            return False
        cid, held = picked
        keys = LeaseKeys(self.s.prefix, held["r"])
        fields = {"victim": cid, "r": held["r"], "tok": held["tok"], "owner": held["owner"]}
        self._mark("lease_delete", "start", **fields)
        # Only while the victim still holds it: one that released between the
        # pick and here lost nothing, and must not count as a holder that
        # never learned of a loss (the checker drops a deletion that found
        # nothing to delete).
        deleted = bool(self.test.eval(_DELETE_IF_HELD, 2, keys.holders, keys.info, held["owner"]))
        self._mark("lease_delete", "end", deleted=deleted, **fields)
        return True
