"""What the figures were measured on: machine, Python, Redis, library versions."""

from __future__ import annotations

import os
import platform
import sys
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

import redis

DISTRIBUTIONS = (
    "celery-redislock",
    "redis",
    "celery",
    "kombu",
    "python-redis-lock",
    "pottery",
    "celery-once",
    "celery-singleton",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe(conn: redis.Redis) -> dict[str, Any]:
    server = conn.info("server")
    versions = {}
    for dist in DISTRIBUTIONS:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "loadavg_at_start": list(os.getloadavg()),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "redis_server": server.get("redis_version"),
        "versions": versions,
    }
