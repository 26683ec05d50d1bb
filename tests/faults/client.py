"""One contending client process: ``python -m tests.faults.client '<json config>'``.

Loops until the stop flag is set: picks a lock or semaphore at random, asks
for it (blocking, with a timeout), and while holding it acts on the
protected resource of that lock, then releases.  Every step is recorded
with Redis TIME (see ``history.py``):

``req``      about to call acquire(r)
``enter``    acquire returned True (tok, owner); ``lt`` is this process's
             ``time.time()`` (shows the clock skew in effect)
``timeout``  acquire returned False; ``acq_err`` it raised (err)
``read``     fenced claim of the resource (acc, value)
``write``    fenced write of value+1 (tok, prev, new, acc, owned = what
             ``owned()`` said just before; the client writes regardless,
             as if paused between its check and its write)
``exit``     done acting, about to release
``refresh``  an explicit refresh() halfway through a long hold (sent: Redis
             TIME before the call; ok: True / False, None if it raised)
``rel``      release returned (ok) or raised LockLost (lost) / another error (err)
``lost``     the heartbeat's on_lost callback ran for the lease (tok, why)

``mutants`` (for the suite's self-test only) break the client on purpose:
``no-fence`` reads and writes the resource with plain HGET / HSET,
``no-heartbeat`` never renews a lease.

A client with ``skew`` set runs with ``time.time`` moved by that many
seconds, before the library is imported: the library must not care.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any


def _skew_clock(seconds: float) -> None:
    if seconds:
        real = time.time
        time.time = lambda: real() + seconds
        time.time_ns = lambda: int((real() + seconds) * 1e9)


def main(config: dict[str, Any]) -> None:
    _skew_clock(config["skew"])
    import redis

    from celery_redislock import FairSemaphore, Lease, LockLost, RedisLock
    from celery_redislock.core.connection import client_from_url
    from celery_redislock.core.fencing import FencedResource
    from celery_redislock.core.leaseset import LeaseSet

    from .history import STOP_KEY, Recorder

    mutants = config.get("mutants", ())
    if "no-heartbeat" in mutants:  # leases are never renewed: expire mid-hold
        from celery_redislock.core.heartbeat import HEARTBEAT

        HEARTBEAT.add = lambda lease: None  # type: ignore[method-assign]
    cid = str(config["id"])
    rng = random.Random(config["seed"])
    rec_client = redis.Redis.from_url(config["rec_url"], socket_timeout=30)
    rec = Recorder(rec_client, cid)
    client = client_from_url(
        config["url"], {"socket_timeout": config["socket_timeout"], "client_name": f"fault-{cid}"}
    )
    ttl = config["ttl"]
    targets: list[tuple[str, int]] = [(name, 1) for name in config["locks"]]
    targets += [(name, limit) for name, limit in config["semaphores"].items()]

    def hold(holder: LeaseSet, name: str, tok: int, seconds: float) -> None:
        """Sleep; halfway through a long hold, call refresh() explicitly."""
        if seconds < ttl / 2 or "no-heartbeat" in mutants:
            time.sleep(seconds)
            return
        time.sleep(seconds / 2)
        sec, usec = rec_client.time()
        sent = sec + usec / 1e6
        try:
            rec("refresh", r=name, tok=tok, sent=sent, ok=holder.refresh())
        except Exception as exc:  # NotOwned (already lost and forgotten), Redis errors
            rec("refresh", r=name, tok=tok, sent=sent, ok=None, err=repr(exc)[:200])
        time.sleep(seconds / 2)

    def on_lost(lease: Lease) -> None:
        rec("lost", r=lease.name, tok=lease.token, why=lease.lost_reason)

    while not rec_client.exists(STOP_KEY):
        name, limit = rng.choice(targets)
        holder: LeaseSet
        if limit == 1:
            holder = RedisLock(client, name, ttl=ttl, prefix=config["prefix"], on_lost=on_lost)
        else:
            holder = FairSemaphore(
                client, name, limit, ttl=ttl, prefix=config["prefix"], on_lost=on_lost
            )
        rec("req", r=name)
        try:
            granted = holder.acquire(blocking=True, timeout=config["acquire_timeout"])
        except Exception as exc:  # Redis paused, restarted, connection killed
            rec("acq_err", r=name, err=repr(exc)[:200])
            time.sleep(0.05)
            continue
        if not granted:
            rec("timeout", r=name)
            continue
        lease = holder.lease
        assert lease is not None
        tok = lease.token
        holding = json.dumps({"r": name, "tok": tok, "owner": lease.owner, "limit": limit})
        rec("enter", holding, r=name, tok=tok, owner=lease.owner, lt=time.time())
        # Mostly short holds; some span several heartbeats (renewal under faults).
        if rng.random() < config["long_share"]:
            work = rng.uniform(0.5, 2.0) * ttl
        else:
            work = rng.uniform(*config["work"])
        if limit == 1:
            resource = FencedResource(rec_client, f"faults:res:{name}")
            if "no-fence" in mutants:  # a plain GET / SET: what fencing prevents
                accepted, prev = True, int(rec_client.hget(resource.key, "value") or 0)
            else:
                claim = resource.claim(tok)
                accepted, prev = claim.accepted, int(claim.value or 0)
            rec("read", r=name, tok=tok, acc=accepted, value=prev)
            hold(holder, name, tok, work)
            if accepted:
                owned = holder.owned()
                if "no-fence" in mutants:
                    rec_client.hset(resource.key, "value", prev + 1)
                    done = True
                else:
                    done = resource.write(tok, prev + 1).accepted
                rec("write", r=name, tok=tok, prev=prev, new=prev + 1, acc=done, owned=owned)
        else:
            hold(holder, name, tok, work)
        rec("exit", "-", r=name, tok=tok)
        try:
            holder.release()
            rec("rel", r=name, tok=tok, ok=True)
        except LockLost:
            rec("rel", r=name, tok=tok, lost=True)
        except Exception as exc:
            rec("rel", r=name, tok=tok, err=repr(exc)[:200])
    rec("bye")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
