"""The Redis core: lease sets (locks and fair semaphores), their Lua scripts,
the heartbeat, fencing, replication and connection helpers.

Nothing in this package imports Celery; the Celery layer (the package above)
builds on it.  See docs/architecture.md.
"""
