"""Test app: the basic app plus a task with a per-account cap and a listed shared cap.

``listed.charge(account_id, n)`` holds a slot of ``acct:<account_id>``
(``semaphore_limit=2``) and of the listed limit ``shared`` (3, or the
integer at ``<prefix>:shared-limit``), under the ``retry`` policy;
``listed.charge_park`` the same under ``park``, ``listed.charge_wait``
under ``wait``, ``listed.charge_skip`` under ``skip``,
``listed.charge_region`` (``park``) lists the templated
``region:{region}`` (1 slot) instead; ``listed.charge_rated``
(``park``) lists ``region`` instead: 100 slots, one start per 10 s;
``listed.charge_capped_rated`` (``park``) lists ``shared`` with one start
per 10 s; ``listed.charge_slow_rated`` (``park``) lists ``slow``: 100
slots, one start an hour; ``listed.charge_latest`` lists ``shared`` under
``keep_latest``, one slot per account (``listed.charge_latest2``: two).  Its body records ``start``
(with the listed names its run holds) and ``end`` events into
``<prefix>:rec:charge:all``; with ``gate`` it runs until the test sets
``<prefix>:gate:<account_id>:<n>``; with ``end="raise"`` it raises
``RuntimeError`` after its start, with ``end="retry"`` its first run calls
``self.retry`` (after its start); with ``hog`` it first holds the GIL in one
C call for that many seconds (its heartbeat thread cannot run meanwhile).

Config ``listed_retry`` sets ``parking.promotion.LISTED_RETRY`` (how long a
parked head sent back by a full listed limit waits when nothing wakes it),
so a test tells a wake-up from that fallback.  Fault points (the first
process to pass one deletes ``<prefix>:fault:<point>`` and SIGKILLs
itself): ``listed_parked`` (back at the head of its park, its own slot not
given back yet), ``listed_released`` (own slot given back, the name not
noted in the limit's blocked set), ``listed_noted`` (noted, or found the
limit with room, and not woken yet), ``listed_woken`` (a release woke a
key and noted it again: one task promoted and published, the rest held
again, no other key woken yet).  Pause points: while
``<prefix>:pause:listed_back`` (or ``...:listed_back:<task id>``) exists,
a run refused by a listed limit waits before going back to its park (its
own slot held), having set ``<prefix>:paused:listed_back`` (and
``...:listed_back:<task id>``); while ``<prefix>:pause:listed_parked``
exists, it waits just after (before ``listed_parked``'s kill), having set
``<prefix>:paused:listed_parked``.

Run as ``celery -A tests.celery_apps.listed worker`` with the basic app's
``REDISLOCK_TEST_*`` environment (see :mod:`tests.celery_apps.basic`).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from celery import Celery

from celery_redislock import Limit, SemaphoreTask
from celery_redislock.parking import arrival, promotion

from . import write_pid_when_ready
from .basic import ENV_PREFIX, config_from_env, create_app
from .pools import c_call

SHARED = "shared"
REGION = "region"
SLOW = "slow"


def create_listed_app(config: dict[str, str]) -> Celery:
    app = create_app(config)
    rec = app.recorder  # type: ignore[attr-defined]
    prefix = config["prefix"]

    def shared_limit(**_: Any) -> int:
        return int(rec.client.get(f"{prefix}:shared-limit") or 3)

    def charge(
        self: Any,
        account_id: str,
        n: int,
        gate: bool = False,
        duration: float = 0.2,
        end: str = "",
        region: str = "eu",
        hog: float = 0.0,
    ) -> int:
        listed = [lease.name for lease in self.request.redislock_listed]
        rec.event(self, "all", "start", account=account_id, n=n, listed=listed)
        if hog:  # one C call that holds the GIL: the child's heartbeat cannot run
            c_call(hog)
        if end == "raise":
            raise RuntimeError(f"charge {account_id} {n} failed")
        if end == "retry" and not self.request.retries:
            raise self.retry(countdown=0.1)
        if gate:  # hold the slots until the test opens this task's gate (or 120 s)
            deadline = time.monotonic() + 120
            while not rec.client.exists(f"{prefix}:gate:{account_id}:{n}"):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
        else:
            time.sleep(duration)
        rec.event(self, "all", "end", account=account_id, n=n)
        return n

    common: dict[str, Any] = {
        "shared": False,
        "bind": True,
        "base": SemaphoreTask,
        "semaphore_key": "acct:{account_id}",
        "semaphore_limit": 2,
        "limits": [Limit(SHARED, shared_limit)],
    }
    app.task(name="listed.charge_park", **common)(charge)
    app.task(
        name="listed.charge",
        lock_policy="retry",
        lock_retry_countdown=0.05,
        lock_retry_jitter=0.2,
        lock_retry_max=None,
        **common,
    )(charge)
    app.task(name="listed.charge_plain", **{**common, "limits": []})(charge)  # same key, no Limit
    app.task(name="listed.charge_wait", lock_policy="wait", **common)(charge)
    app.task(name="listed.charge_skip", lock_policy="skip", **common)(charge)
    app.task(
        name="listed.charge_region",
        **{**common, "limits": [Limit("region:{region}", 1)]},
    )(charge)
    app.task(
        name="listed.charge_rated",
        **{**common, "limits": [Limit(REGION, 100, rate=0.1)]},
    )(charge)
    app.task(
        name="listed.charge_capped_rated",
        **{**common, "limits": [Limit(SHARED, shared_limit, rate=0.1)]},
    )(charge)
    app.task(
        name="listed.charge_slow_rated",
        **{**common, "limits": [Limit(SLOW, 100, rate="1/h")]},
    )(charge)
    app.task(
        name="listed.charge_latest",
        **{**common, "semaphore_limit": 1, "lock_policy": "keep_latest"},
    )(charge)
    app.task(name="listed.charge_latest2", **{**common, "lock_policy": "keep_latest"})(charge)
    return app


def _install_faults(prefix: str, rec: Any) -> None:
    def kill_at(point: str) -> None:
        if rec.client.delete(f"{prefix}:fault:{point}"):
            os.kill(os.getpid(), signal.SIGKILL)

    back_to_the_head = arrival._back_to_the_head
    note_waiting = arrival.note_waiting
    block = promotion.LIMIT_BLOCK
    promote_woken = promotion._promote_woken

    def pause_at(*points: str) -> None:
        """Wait while any of ``<prefix>:pause:<point>`` exists (60 s at most)."""
        keys = [f"{prefix}:pause:{point}" for point in points]
        if not rec.client.exists(*keys):
            return
        for point in points:
            rec.client.set(f"{prefix}:paused:{point}", 1)
        deadline = time.monotonic() + 60
        while rec.client.exists(*keys) and time.monotonic() < deadline:
            time.sleep(0.02)

    def parked(*args: Any, **kwargs: Any) -> Any:
        pause_at("listed_back", f"listed_back:{args[1].id}")
        pending = back_to_the_head(*args, **kwargs)
        pause_at("listed_parked")
        kill_at("listed_parked")
        return pending

    def released(*args: Any, **kwargs: Any) -> None:  # once the own slot was given back
        kill_at("listed_released")
        note_waiting(*args, **kwargs)

    def noted(*args: Any, **kwargs: Any) -> Any:
        reply = block(*args, **kwargs)
        kill_at("listed_noted")
        return reply

    def woken(*args: Any, **kwargs: Any) -> Any:  # promoted one, the rest held again
        published = promote_woken(*args, **kwargs)
        kill_at("listed_woken")
        return published

    arrival._back_to_the_head = parked  # type: ignore[assignment]
    promotion._promote_woken = woken  # type: ignore[assignment]
    arrival.note_waiting = released  # type: ignore[assignment]
    promotion.LIMIT_BLOCK = noted  # type: ignore[assignment]


if os.environ.get(ENV_PREFIX + "PREFIX"):
    app = create_listed_app(config_from_env())
    if os.environ.get(ENV_PREFIX + "LISTED_RETRY"):
        promotion.LISTED_RETRY = float(os.environ[ENV_PREFIX + "LISTED_RETRY"])
    _install_faults(app.conf.redislock_prefix, app.recorder)  # type: ignore[attr-defined]
    write_pid_when_ready(ENV_PREFIX + "READY_FILE")
