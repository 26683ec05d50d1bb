"""Read-only views of the locks and semaphores in a Redis, and force-release.

Used by the ``celery redislock`` command (:mod:`celery_redislock.admin.cli`), usable
on its own::

    snap = snapshot(client, "redislock")
    for ls in snap.lease_sets:
        print(ls.name, len(ls.holders), len(ls.waiters))

Finding lease sets walks the keyspace with ``SCAN ... MATCH <prefix>:{*}
TYPE zset`` (Redis >= 6.0), never ``KEYS``, so it does not block the server
however many keys it holds; the lease sets found are then read with the
``inspect.lua`` script, pipelined in batches (on a Cluster, one call per name:
redis-py's cluster pipeline refuses scripts).

What is and is not guaranteed: each lease set is read atomically (one
script), but a snapshot of many is not a single point in time: holders may
come and go between batches.  SCAN may miss a lease set created or deleted
while it runs (it never misses one that exists throughout).

Force-release removes a holder's slot in Redis; it does *not* stop the task
running under it.  That task's heartbeat finds the lease gone at its next
beat and reports it lost (``owned()`` turns False).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from .heartbeat import is_cluster
from .keys import LeaseKeys, validate_name, validate_prefix
from .leaseset import Holder, LeaseSet, Waiter, parse_inspect
from .park import room_came_back
from .scripts import INSPECT, text

log = logging.getLogger("celery_redislock")

__all__ = [
    "LeaseSetState",
    "Snapshot",
    "force_release",
    "inspect_names",
    "scan_names",
    "snapshot",
    "task_id_of",
]

SCAN_COUNT = 1000
BATCH_SIZE = 200
_GLOB_SPECIAL = "*?[]\\"


@dataclass(frozen=True)
class LeaseSetState:
    """One lock or semaphore as Redis holds it at ``now`` (Redis time, s)."""

    prefix: str
    name: str
    now: float
    holders: tuple[Holder, ...]
    waiters: tuple[Waiter, ...]
    #: the limit declared by the code that holds it (e.g. the task class), if known
    declared_limit: int | None = None

    @property
    def limit(self) -> int | None:
        """The slot count: recorded in a holder's meta (``"limit"``), else
        :attr:`declared_limit`; None when unknown (Redis does not store it)."""
        metas = [h.meta for h in self.holders] + [w.meta for w in self.waiters]
        for meta in metas:
            value = meta.get("limit")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return self.declared_limit

    @property
    def task_names(self) -> list[str]:
        """The Celery task names recorded by holders and waiters (meta ``"task"``)."""
        names = {
            m.get("task") for m in [h.meta for h in self.holders] + [w.meta for w in self.waiters]
        }
        return sorted(n for n in names if isinstance(n, str))

    @property
    def kind(self) -> str:
        """``"lock"``, ``"semaphore"``, or ``"unknown"`` (limit not recorded
        and a single holder: a lock, or a semaphore with one slot taken)."""
        limit = self.limit
        if limit is not None:
            return "lock" if limit == 1 else "semaphore"
        return "semaphore" if len(self.holders) > 1 else "unknown"

    @property
    def keys(self) -> LeaseKeys:
        return LeaseKeys(self.prefix, self.name)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready description (ages and remaining TTLs in seconds)."""
        return {
            "name": self.name,
            "key": self.keys.base,
            "kind": self.kind,
            "limit": self.limit,
            "held": len(self.holders),
            "waiting": len(self.waiters),
            "holders": [
                {
                    "owner": h.owner,
                    "token": h.token,
                    "task_id": task_id_of(h.owner, h.meta),
                    "task": h.meta.get("task"),
                    "host": h.meta.get("host"),
                    "pid": h.meta.get("pid"),
                    "age": round(max(self.now - h.acquired_at, 0.0), 3),
                    "expires_in": round(h.expires_in, 3),
                    "ttl": h.ttl,
                    "meta": h.meta,
                }
                for h in self.holders
            ],
            "waiters": [
                {
                    "position": i + 1,
                    "owner": w.owner,
                    "task_id": task_id_of(w.owner, w.meta),
                    "task": w.meta.get("task"),
                    "host": w.meta.get("host"),
                    "pid": w.meta.get("pid"),
                    "ttl": w.ttl,
                    "meta": w.meta,
                }
                for i, w in enumerate(self.waiters)
            ],
        }


@dataclass(frozen=True)
class Snapshot:
    prefix: str
    lease_sets: tuple[LeaseSetState, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "lease_sets": [ls.as_dict() for ls in self.lease_sets],
            "held": sum(len(ls.holders) for ls in self.lease_sets),
            "waiting": sum(len(ls.waiters) for ls in self.lease_sets),
        }


def task_id_of(owner: str, meta: dict[str, Any]) -> str | None:
    """The Celery task id behind a holder or waiter, if known.

    From ``meta["task_id"]``, else from the owner id the task classes build
    (``<task id>.<host tag>.<pid>.<random>``).
    """
    value = meta.get("task_id")
    if isinstance(value, str) and value:
        return value
    parts = owner.split(".")
    if len(parts) == 4 and parts[0] and parts[2].isdigit():
        return parts[0]
    return None


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern."""
    return "".join("\\" + c if c in _GLOB_SPECIAL else c for c in text)


def scan_names(client: Any, prefix: str, match: str = "*") -> Iterator[str]:
    """Names of the lease sets under ``prefix`` that have holders or waiters.

    ``match`` is a Redis glob on the name (e.g. ``"account:*"``).  Each name
    is yielded once.  Uses SCAN with ``TYPE zset`` (Redis >= 6.0): only the
    ``holders`` and ``queue`` sorted sets are looked at.
    """
    prefix = validate_prefix(prefix)
    pattern = f"{glob_escape(prefix)}:{{{match}}}:*"
    seen: set[str] = set()
    for raw in client.scan_iter(match=pattern, count=SCAN_COUNT, _type="zset"):
        key = text(raw)
        parsed = LeaseKeys.parse(key)
        if parsed is None or parsed.prefix != prefix or parsed.name in seen:
            continue
        if key not in (parsed.holders, parsed.queue):
            continue
        seen.add(parsed.name)
        yield parsed.name


def inspect_names(client: Any, prefix: str, names: Iterable[str]) -> list[LeaseSetState]:
    """The state of each named lease set (empty ones included), pipelined (one
    call per name on a Cluster).

    Raises ``TypeError``/``ValueError`` for a name no lock could have.
    """
    prefix = validate_prefix(prefix)
    names = [validate_name(n) for n in names]
    result: list[LeaseSetState] = []
    for start in range(0, len(names), BATCH_SIZE):
        chunk = names[start : start + BATCH_SIZE]
        replies = _inspect_batch(client, prefix, chunk)
        result += [_state(prefix, n, r) for n, r in zip(chunk, replies, strict=True)]
    return result


def snapshot(client: Any, prefix: str, match: str = "*") -> Snapshot:
    """Every lease set under ``prefix`` (name matching ``match``) that has
    holders or waiters, sorted by name."""
    states = inspect_names(client, prefix, sorted(scan_names(client, prefix, match)))
    return Snapshot(prefix, tuple(s for s in states if s.holders or s.waiters))


def force_release(
    client: Any, prefix: str, name: str, owners: Sequence[str] | None = None
) -> list[Holder]:
    """Release the slots of ``owners`` (default: every current holder) of ``name``.

    Returns the holders whose unexpired slot was released.  Each freed slot
    is handed to the first live waiter, as a normal release would, and the
    sweepers are woken for the name's parked work and for the keys waiting
    for it as a listed limit (``room_came_back``).  The
    limit passed to the release script is the number of holders seen just
    before, which is never more than the real limit, so a force-release can
    never admit more holders than there were.
    """
    state = inspect_names(client, prefix, [name])[0]
    by_owner = {h.owner: h for h in state.holders}
    targets = list(by_owner) if owners is None else list(owners)
    unknown = [o for o in targets if o not in by_owner]
    if unknown:
        raise KeyError(f"not a current holder of {name!r}: {', '.join(unknown)}")
    if not targets:
        return []
    # indexed: a waiter this release hands the slot to is listed for the exporter
    lease_set = LeaseSet(client, name, max(len(state.holders), 1), prefix=prefix, index=True)
    released = [by_owner[o] for o in targets if lease_set.release_owner(o)]
    if released:
        try:
            room_came_back(client, prefix, name)
        except RedisError as exc:  # the sweepers' periodic pass comes anyway
            log.warning("released %r, but could not wake the sweepers (%r)", name, exc)
    return released


# -- internals ------------------------------------------------------------------


def _inspect_batch(client: Any, prefix: str, names: list[str]) -> list[Any]:
    if is_cluster(client):  # redis-py's cluster pipeline refuses scripts (8.x)
        return [INSPECT(client, LeaseKeys(prefix, n).script_keys(), []) for n in names]
    replies = INSPECT.pipelined(client, [(LeaseKeys(prefix, n).script_keys(), []) for n in names])
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _state(prefix: str, name: str, reply: Any) -> LeaseSetState:
    now, holders, waiters = parse_inspect(reply)
    holders.sort(key=lambda h: h.token)
    return LeaseSetState(prefix, name, now, tuple(holders), tuple(waiters))
