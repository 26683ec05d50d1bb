"""``raise``: a contended task fails at once with :class:`LockContended`."""

from __future__ import annotations

from typing import NoReturn

from .base import Context, Policy, fail

__all__ = ["Raise"]


class Raise(Policy):
    """Right when the caller must know at once that the work did not run:
    the run ends in state ``FAILURE`` with :class:`LockContended`."""

    name = "raise"

    def contended(self, ctx: Context) -> NoReturn:
        fail(ctx, self.name, f"{ctx.refusal} (policy raise)")
