"""Opt-in replica acknowledgement of an acquisition (``WAIT``), as Redisson offers.

Redis replicates asynchronously: a primary that fails right after granting a
lease may be replaced by a replica that never saw it, and the next caller is
granted the same lock.  ``LeaseSet(..., replicas=N)`` narrows that window:
after the grant, the acquirer asks the primary to ``WAIT`` until ``N``
replicas have acknowledged everything written so far, and gives the lease
back (raising :class:`~celery_redislock.core.errors.NotReplicated`) if fewer do in
time.

What it guarantees: when ``acquire`` returns True, at least ``N`` replicas
had received the grant, so a failover to one of them keeps the lease.

What it does not: ``WAIT`` is a separate command after the acquire script,
not atomic with it; the replicas hold the grant in memory only (no fsync);
Sentinel or Cluster may still promote a replica that did not acknowledge,
and a partitioned old primary keeps accepting renewals until it is demoted.
So two holders remain possible across a failover: only a fencing token
checked by the protected resource makes that safe.
"""

from __future__ import annotations

from typing import Any

from .scripts import TOUCH_FENCE

__all__ = ["FENCE_MEMORY_MS", "acknowledged_by"]

FENCE_MEMORY_MS = 600_000  # as includes/next_token.lua


def acknowledged_by(client: Any, fence_key: str, replicas: int, timeout_ms: int) -> int:
    """How many replicas acknowledged this lease set's latest writes within ``timeout_ms``.

    ``WAIT`` counts the writes of the connection it is sent on, and the grant
    may have been written by another connection (a releaser's hand-off, or
    an earlier call from the pool).  So one pipeline (one connection, one
    round trip) first re-sets the fence key's expiry to what every grant sets
    it to (a write that changes nothing but replicates after the grant), then
    waits for that write; replication is ordered, so a replica that has it
    has the grant too.  On a cluster both go to the primary of the key's slot.
    """
    if hasattr(client, "get_node_from_key"):
        client = client.get_redis_connection(client.get_node_from_key(fence_key))
    pipe = client.pipeline(transaction=False)
    # EVAL, not EVALSHA: a node that lacks the script must not fail the pipeline.
    pipe.eval(TOUCH_FENCE.source, 1, fence_key, FENCE_MEMORY_MS)
    pipe.execute_command("WAIT", replicas, timeout_ms)
    touched, acked = pipe.execute()
    return int(acked) if touched else 0
