"""The ``basic`` test app, plus ``redislock_transport_options`` from the environment.

``REDISLOCK_TEST_LOCK_OPTIONS`` (JSON) carries e.g. Sentinel's ``master_name``
to a worker started with ``-A tests.celery_apps.scale``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.celery_apps import basic


def create_app(config: dict[str, str]) -> Any:
    app = basic.create_app(config)
    app.conf.redislock_transport_options = json.loads(config.get("lock_options", "{}"))
    return app


if os.environ.get(basic.ENV_PREFIX + "PREFIX"):
    app = basic.app
    app.conf.redislock_transport_options = json.loads(
        os.environ.get(basic.ENV_PREFIX + "LOCK_OPTIONS", "{}")
    )
