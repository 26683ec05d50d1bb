"""The Celery app the CLI tests pass with ``-A tests.cli_app``.

Its broker (and so its ``redislock_url``) and ``redislock_prefix`` come from
the environment, so a ``celery`` subprocess can be pointed at a test's Redis
and prefix; in-process tests set ``app.conf`` directly.
"""

from __future__ import annotations

import os

from celery import Celery

app = Celery(
    "cli_app",
    broker=os.environ.get("CLI_APP_REDIS_URL", "redis://127.0.0.1:1/0"),
)
app.conf.redislock_prefix = os.environ.get("CLI_APP_PREFIX", "redislock")
