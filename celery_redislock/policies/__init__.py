"""Contention policies: what a guarded task does when its lock or slot is taken.

One small class per policy, all behind :class:`Policy`; ``GuardedTask`` asks
the policy named by ``lock_policy`` (or the per-call header) to acquire, and
calls its ``contended`` when that fails.  Every policy ends a contended run
in a visible state with a log line; none drops a task silently.
"""

from __future__ import annotations

from .base import Attempt, Policy, announce_contended, fail
from .fail import Raise
from .park import Park
from .retry import Requeue, defer_to_earlier_delivery, requeue
from .skip import SKIPPED, Skip
from .wait import Wait

__all__ = [
    "POLICIES",
    "SKIPPED",
    "Attempt",
    "Policy",
    "announce_contended",
    "check_policy",
    "defer_to_earlier_delivery",
    "fail",
    "requeue",
]

#: policy name -> the policy
POLICIES: dict[str, Policy] = {p.name: p for p in (Skip(), Requeue(), Wait(), Raise(), Park())}


def check_policy(policy: object, what: str = "lock_policy") -> str:
    """``policy`` if it names a policy, else a ValueError listing them."""
    if policy not in POLICIES:
        raise ValueError(f"{what} must be one of {', '.join(POLICIES)}; got {policy!r}")
    return str(policy)
