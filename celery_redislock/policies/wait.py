"""``wait``: a contended task waits in the worker, FIFO, woken by the release."""

from __future__ import annotations

from typing import NoReturn

from .base import Attempt, Policy, fail

__all__ = ["Wait"]


class Wait(Policy):
    """Blocks a worker process (or thread) for up to ``lock_wait_timeout``.

    No polling: the release hands the slot to the first waiter.  Use it for
    short holds; a long backlog of one key would occupy the pool.
    """

    name = "wait"

    def acquire(self, attempt: Attempt) -> bool:
        return attempt.lease_set.acquire(blocking=True, timeout=attempt.wait_timeout)

    def contended(self, attempt: Attempt) -> NoReturn:
        fail(
            attempt,
            self.name,
            f"{attempt.kind} {attempt.name!r} still held after waiting "
            f"{attempt.wait_timeout} s (policy wait)",
        )
