"""The live web view: ``celery -A proj redislock web --port 8808``.

A page that polls the state of the locks, semaphores, parks and rates in
Redis every 2 s and re-renders in place (docs/observability.md, "The live
web view"): :mod:`.state` reads it (bounded, as ``status --top``),
:mod:`.actions` holds the operator's actions, :mod:`.server` serves both
(the standard library's ``http.server``), ``static/`` holds the page, its
script and style (package data, no build step).  The command is in
:mod:`celery_redislock.admin.web.command`.
"""

from __future__ import annotations

from .server import WebServer, allowed_host

__all__ = ["WebServer", "allowed_host"]
