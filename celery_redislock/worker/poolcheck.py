"""Refuse a green pool (gevent, eventlet) for a worker with guarded tasks.

Run at ``worker_init`` (worker/lifecycle.py, the worker's main process): with
monkey-patching the heartbeat is a greenlet, so a body that does not yield
for longer than its ttl loses its lease while it runs (docs/pools.md).
"""

from __future__ import annotations

from typing import Any

from ..settings import settings_for

__all__ = ["check_pool"]


def check_pool(worker: Any) -> None:
    """Refuse (``SystemExit``, one line) a gevent/eventlet worker that runs guarded tasks.

    With monkey-patching, the heartbeat is a greenlet: a body that does not
    yield for longer than its ttl (a CPU loop, a long C call) stops every
    renewal and loses its lease while it runs; there is no pool child whose
    parent could renew it.  Measured in docs/pools.md.  Set
    ``redislock_allow_green_pool = True`` when every guarded body yields
    (I/O, ``sleep``) much more often than its ttl.
    """
    from celery import concurrency

    from ..task import GuardedTask

    app = worker.app
    pool_cls = concurrency.get_implementation(worker.pool_cls)
    if not getattr(pool_cls, "is_green", False) or settings_for(app).allow_green_pool:
        return
    guarded = sorted(n for n, t in app.tasks.items() if isinstance(t, GuardedTask))
    if guarded:
        pool = pool_cls.__module__.rsplit(".", 1)[-1]
        raise SystemExit(
            f"celery-redislock: the {pool} pool cannot renew leases while a task body "
            f"runs without yielding ({guarded[0]} ...): use -P prefork (or threads), or set "
            "redislock_allow_green_pool = True if every guarded body yields well within its ttl"
        )
