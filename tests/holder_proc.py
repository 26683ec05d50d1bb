"""A separate process that holds one lock or semaphore slot (for CLI tests).

``python -m tests.holder_proc URL PREFIX NAME LIMIT TTL META_JSON`` waits
(blocking, FIFO) for a slot, prints ``{"token": ..., "pid": ..., "owner": ...}``
on one line, then holds it until stdin closes.  If the heartbeat finds the
lease lost meanwhile it prints ``lost``; on stdin EOF it releases (if still
held) and prints ``released`` or ``was lost``.
"""

from __future__ import annotations

import json
import os
import sys

import redis

from celery_redislock.core.lease import Lease
from celery_redislock.core.leaseset import LeaseSet


def main(argv: list[str]) -> int:
    url, prefix, name, limit, ttl, meta = argv
    client = redis.Redis.from_url(url, socket_timeout=10)

    def lost(lease: Lease) -> None:
        print("lost", flush=True)

    lease_set = LeaseSet(
        client, name, int(limit), ttl=float(ttl), prefix=prefix, meta=json.loads(meta), on_lost=lost
    )
    lease_set.acquire(blocking=True)
    assert lease_set.lease is not None
    print(
        json.dumps({"token": lease_set.token, "pid": os.getpid(), "owner": lease_set.lease.owner}),
        flush=True,
    )
    sys.stdin.read()
    if lease_set.owned():
        lease_set.release()
        print("released", flush=True)
    else:
        print("was lost", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
