"""Contention policies: what a guarded task does when its lock or slot is taken.

One small class per policy, all behind :class:`Policy`, in a module named
like the policy (``raise`` is ``raise_.py``); every hook receives one
:class:`Context`.  ``GuardedTask`` asks the policy named by ``lock_policy``
(or the per-call header) to publish, to acquire, to end a contended run
(``contended``) and to give the slot back.  Every policy ends a contended run
in a visible state with a log line; none drops a task silently.
"""

from __future__ import annotations

from typing import Any

from .base import Context, Phase, Policy, announce_contended, fail
from .keep_latest import KeepLatest
from .park import Park
from .raise_ import Raise
from .retry import Retry, requeue, restore_retries
from .skip import SKIPPED, Skip
from .wait import Wait

__all__ = [
    "POLICIES",
    "SKIPPED",
    "Context",
    "KeepLatest",
    "Park",
    "Phase",
    "Policy",
    "Raise",
    "Retry",
    "Skip",
    "Wait",
    "announce_contended",
    "check_call",
    "check_options",
    "check_policy",
    "fail",
    "requeue",
    "restore_retries",
]

#: policy name -> the policy
POLICIES: dict[str, Policy] = {
    p.name: p for p in (Skip(), Retry(), Wait(), Raise(), Park(), KeepLatest())
}


def check_options(task: Any) -> None:
    """At decoration: each policy checks the options it owns (refused on a
    task of another policy), the task's policy whether it takes a rate, and
    whether the class's ``lock_dedupe`` combines with it (:func:`check_call`)."""
    for policy in POLICIES.values():
        policy.check_options(task)
    name = getattr(task, "name", None) or task.__name__
    policy = POLICIES[check_policy(task.lock_policy)]
    policy.check_rate(name, task.rate)
    check_call(task, policy, task.lock_dedupe is True)  # the class's own call options


def check_policy(policy: object, what: str = "lock_policy") -> str:
    """``policy`` if it names a policy, else a ValueError listing them."""
    if policy not in POLICIES:
        raise ValueError(f"{what} must be one of {', '.join(POLICIES)}; got {policy!r}")
    return str(policy)


def check_call(task: Any, policy: Policy, dedupe: bool = False) -> None:
    """Each call (at ``apply_async``, and in the worker for a ``send_task``'s
    headers): a ``ValueError`` when the call's own ``lock_policy`` (``policy``)
    or its ``lock_dedupe`` would drop what the task's options promise."""
    declared = POLICIES[task.lock_policy]  # checked at decoration
    if policy is not declared:
        declared.check_other_policy(task, policy)
    if dedupe and policy.coalesces:
        name = getattr(task, "name", None) or task.__name__
        raise ValueError(
            f"task {name}: lock_dedupe does not combine with lock_policy={policy.name!r} "
            "(a call made while a run is queued or running would get that run's result "
            "instead of a run that starts after it)"
        )
