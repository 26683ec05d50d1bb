"""The operator's tools: the ``celery redislock`` command, the web view,
the Prometheus exporter's gauges and the rows they show.
See docs/architecture.md."""
