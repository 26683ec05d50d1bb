"""``skip``: a contended task does not run; it ends in state ``SKIPPED``."""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from celery.exceptions import Ignore

from .. import events
from .base import Context, Policy

__all__ = ["SKIPPED", "Skip"]

log = logging.getLogger("celery_redislock")

#: the result state of a skipped task (a custom state: ``AsyncResult.get()`` keeps waiting)
SKIPPED = "SKIPPED"


class Skip(Policy):
    """Right when a duplicate adds nothing (a cache rebuild already under way).

    The task ends through Celery's ``Ignore``: its ``link`` callbacks and the
    rest of its chain do not run.  Under eager execution the state is
    ``IGNORED``.
    """

    name = "skip"

    def contended(self, ctx: Context) -> NoReturn:
        task = ctx.task
        log.warning("%s[%s] skipped: %s (policy skip)", task.name, ctx.task_id, ctx.refusal)
        meta: dict[str, Any] = {"lock": ctx.name, "kind": ctx.kind, "policy": "skip"}
        if ctx.refused_by is not None:
            meta["refused_by"] = ctx.refused_by
        task.update_state(task_id=ctx.task_id, state=SKIPPED, meta=meta)
        # Ignore ends the run without a terminal event: monitors would show
        # it STARTED for ever.  task-skipped makes it SKIPPED there too.
        if not ctx.request.is_eager:  # an eager call sends no events, as in Celery
            events.send(task.app, "task-skipped", ctx.task_id, name=task.name, **meta)
        raise Ignore()
