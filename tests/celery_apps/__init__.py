"""Celery apps the tests run in real ``celery worker`` subprocesses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery.signals import worker_ready


def write_pid_when_ready(env_var: str) -> None:
    """When this worker is ready, write its pid to the file named by ``env_var`` (if set).

    The harness waits for that file instead of sleeping.
    """

    @worker_ready.connect(weak=False)
    def _ready(**_: Any) -> None:
        path = os.environ.get(env_var)
        if path:
            Path(path).write_text(str(os.getpid()))
