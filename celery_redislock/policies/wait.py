"""``wait``: a contended task waits in the worker, FIFO, woken by the release."""

from __future__ import annotations

from typing import NoReturn

from .base import Context, Policy, fail

__all__ = ["Wait"]


class Wait(Policy):
    """Blocks a worker process (or thread) for up to ``lock_wait_timeout``.

    No polling: the release hands the slot to the first waiter.  Use it for
    short holds; a long backlog of one key would occupy the pool.
    """

    name = "wait"
    refuses_rate = (
        "a waiter holds its place in the slot queue, not in time; use 'park' (the default "
        "of SemaphoreTask and RateLimitedTask), 'retry', 'skip' or 'raise'"
    )

    def acquire(self, ctx: Context) -> bool:
        return ctx.need_lease_set().acquire(blocking=True, timeout=ctx.wait_timeout)

    def waits_for_listed(self, ctx: Context) -> bool:
        """With ``limits=``: it waits for its own key in the queue, then for
        the listed limits by looking again, holding nothing in between."""
        return True

    def contended(self, ctx: Context) -> NoReturn:
        held = f"{ctx.kind} {ctx.name!r} still held"
        if ctx.refused_by is not None or ctx.rate_wait is not None:
            held = ctx.refusal
        fail(ctx, self.name, f"{held} {ctx.waited} (policy wait)")
