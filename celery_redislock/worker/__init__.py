"""The worker main process: what a worker does at start and stop (the
connection to Celery's worker signals, the start-time checks, the pool check,
the metrics server).  See docs/architecture.md."""
