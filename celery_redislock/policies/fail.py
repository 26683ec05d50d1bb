"""``raise``: a contended task fails at once with :class:`LockContended`."""

from __future__ import annotations

from typing import NoReturn

from .base import Attempt, Policy, fail

__all__ = ["Raise"]


class Raise(Policy):
    name = "raise"

    def contended(self, attempt: Attempt) -> NoReturn:
        fail(attempt, self.name, f"{attempt.kind} {attempt.name!r} is held (policy raise)")
