"""A Celery app for the CLI's URL tests: its lock Redis comes from the environment.

``CLI_URLS_LOCK_URL`` becomes ``redislock_url`` and ``CLI_URLS_MASTER`` the
broker's Sentinel ``master_name`` (``broker_transport_options``), as a
project with a Sentinel broker writes it.  The broker itself is never used.
"""

from __future__ import annotations

import os

from celery import Celery

app = Celery("cli_urls", broker="redis://127.0.0.1:1/0")
app.conf.redislock_url = os.environ.get("CLI_URLS_LOCK_URL")
if os.environ.get("CLI_URLS_MASTER"):
    app.conf.broker_transport_options = {"master_name": os.environ["CLI_URLS_MASTER"]}
