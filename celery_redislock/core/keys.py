"""Key layout and validation of names: every key the package writes is named here.

All keys of one lock or semaphore share the hash tag ``{name}``, so a lease
set lives in one Redis Cluster slot and every script touches one slot only::

    <prefix>:{<name>}:holders   ZSET  owner -> lease expiry (Redis time, ms)
    <prefix>:{<name>}:info      HASH  owner -> token, acquired time, ttl, limit, meta
    <prefix>:{<name>}:fence     STR   last fencing token (expires 10 min after use)
    <prefix>:{<name>}:queue     ZSET  waiting owner -> arrival
    <prefix>:{<name>}:qinfo     HASH  waiting owner -> wait lease, ttl, limit, meta
    <prefix>:{<name>}:wake:<owner>  LIST  hand-off signal for one waiter
    <prefix>:{<name>}:override  HASH  run-time overrides of the limit and rate (override.py)
    <prefix>:{<name>}:blocked   ZSET  names whose parked heads wait for this name as a
                                listed limit (limit_block.lua, limit_wake.lua)
    <prefix>:{<name>}:blocked:limits  HASH  the limit each of them asks of it
    <prefix>:{<name>}:blocked:turns  ZSET  names that had a turn of this listed limit
                                and left the blocked set -> when (includes/record_turn.lua)
    <prefix>:{<name>}:enqueued:<task name>  STR  lock_dedupe marker of one task (dedupe_claim.lua)
    <prefix>:{<name>}:throttle:<task name>  STR  the window of lock_throttle without
                                trailing, of one task (dedupe_claim.lua)
    <prefix>:{<name>}:rate      STR   the rate's theoretical arrival time (includes/gcra.lua)
    <prefix>:{<name>}:pause     STR   present while starts of the name are paused
    <prefix>:{<name>}:started   STR   the schedule of the name's starts (includes/gcra.lua)
    <prefix>:{<name>}:park / :parked / :inflight / :pmeta / :tokens / :msgs
                                the park of the name (ParkKeys, includes/park_keys.lua)
    <prefix>:{<name>}:state:<task id>  STR  held while a state of that task is
                                written to the result backend (state_hold.lua)
    <prefix>:{park:index}       ZSET  names with parked work (own slot)
    <prefix>:{park:index}:total STR   tasks parked over all names
    <prefix>:{park:index}:wake  channel: a name's time became the earliest
    <prefix>:{park:index}:limits  ZSET  listed limits whose waiting keys the sweepers
                                wake (an override changed: limit_changed.lua)
    <prefix>:{held:index}       ZSET  names that may have a live lease -> its latest
                                expiry (single server; the exporter's slot gauges)
    <prefix>:park-revoked:<task id>  STR  revoke record of a parked task
    <prefix>:{live:<space>} and :<process>  statements of worker processes
                                (liveness.py, live_*.lua)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

__all__ = [
    "DEFAULT_PREFIX",
    "MAX_NAME_LENGTH",
    "SUPERSEDED_FIELD",
    "LeaseKeys",
    "LiveKeys",
    "ParkKeys",
    "RateKeys",
    "held_index",
    "limits_to_wake",
    "park_index",
    "park_total",
    "park_wake_channel",
    "revoke_record",
    "validate_name",
    "validate_prefix",
]

DEFAULT_PREFIX = "redislock"
#: the field of a lease set's info hash that marks its holders superseded
#: (``SUPERSEDED_FIELD`` in includes/lease_set_keys.lua): ``"<token>|<task id>"``
SUPERSEDED_FIELD = ":superseded"
MAX_NAME_LENGTH = 1024


def validate_name(name: object) -> str:
    """Return ``name`` if it is usable as a lock name, else raise ``TypeError``/``ValueError``."""
    if not isinstance(name, str):
        raise TypeError(f"lock name must be a str, got {type(name).__name__}: {name!r}")
    if not name:
        raise ValueError("lock name must not be empty")
    if "{" in name or "}" in name:
        raise ValueError(f"lock name must not contain '{{' or '}}' (used as hash tag): {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(
            f"lock name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}"
        )
    return name


def validate_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"key prefix must be a str, got {type(prefix).__name__}: {prefix!r}")
    if not prefix or "{" in prefix or "}" in prefix:
        raise ValueError(f"key prefix must be non-empty and free of '{{' and '}}': {prefix!r}")
    return prefix


@dataclass(frozen=True)
class LeaseKeys:
    """The Redis keys of one lock or semaphore.  ``indexed``: the scripts
    that grant and renew its leases also list the name in
    :func:`held_index` (the Celery layer's lease sets, on a single server)."""

    prefix: str
    name: str
    indexed: bool = False

    @cached_property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.name}}}"

    @cached_property
    def holders(self) -> str:
        return f"{self.base}:holders"

    @cached_property
    def info(self) -> str:
        return f"{self.base}:info"

    @cached_property
    def fence(self) -> str:
        return f"{self.base}:fence"

    @cached_property
    def queue(self) -> str:
        return f"{self.base}:queue"

    @cached_property
    def qinfo(self) -> str:
        return f"{self.base}:qinfo"

    @cached_property
    def wake_prefix(self) -> str:
        return f"{self.base}:wake:"

    def wake(self, owner: str) -> str:
        return self.wake_prefix + owner

    @cached_property
    def override(self) -> str:
        return f"{self.base}:override"

    @cached_property
    def blocked(self) -> str:
        """The names whose parked heads wait for this name as a listed limit."""
        return f"{self.base}:blocked"

    @cached_property
    def blocked_limits(self) -> str:
        """The limit each of :attr:`blocked` asks of this name."""
        return f"{self.base}:blocked:limits"

    @cached_property
    def blocked_turns(self) -> str:
        """Names that had a turn of this name as a listed limit and left
        :attr:`blocked` -> when (includes/record_turn.lua)."""
        return f"{self.base}:blocked:turns"

    def blocked_keys(self) -> list[str]:
        """KEYS of limit_forget.lua, and of limit_block.lua, limit_wake.lua and
        limit_release.lua after the seven: blocked, its limits and its turns."""
        return [self.blocked, self.blocked_limits, self.blocked_turns]

    def dedupe_marker(self, task_name: str) -> str:
        """Per task name: two tasks whose keys give one name never share a marker."""
        return f"{self.base}:enqueued:{task_name}"

    def throttle_marker(self, task_name: str) -> str:
        return f"{self.base}:throttle:{task_name}"

    def lease_keys(self) -> list[str]:
        """The seven keys of a lease set, in the order includes/lease_set_keys.lua documents."""
        return list(self._lease_keys)

    @cached_property
    def _lease_keys(self) -> tuple[str, ...]:
        return (
            self.holders,
            self.info,
            self.fence,
            self.queue,
            self.qinfo,
            self.wake_prefix,
            self.override,
        )

    def script_keys(self) -> list[str]:
        """KEYS of acquire/release/inspect: the seven, and the index when indexed."""
        return [*self.lease_keys(), *self._held()]

    @cached_property
    def encoded_script_keys(self) -> tuple[bytes, ...]:
        """:meth:`script_keys` encoded once: every script call of a lease set sends them."""
        return tuple(k.encode() for k in self.script_keys())

    def refresh_keys(self) -> list[str]:
        """KEYS of ``refresh_prefix.lua`` (and of ``refresh.lua`` for this lease alone)."""
        return [self.holders, self.info, *self._held()]

    def _held(self) -> list[str]:
        return [held_index(self.prefix)] if self.indexed else []

    @classmethod
    def parse(cls, key: str) -> LeaseKeys | None:
        """The lease set a key such as ``prefix:{name}:holders`` belongs to, if any."""
        open_, close = key.find(":{"), key.find("}:")
        if open_ <= 0 or close < open_:
            return None
        return cls(key[:open_], key[open_ + 2 : close])


@dataclass(frozen=True)
class ParkKeys(LeaseKeys):
    """The keys of one name's park, beside its lease set (same hash tag)."""

    @cached_property
    def park(self) -> str:
        return f"{self.base}:park"

    @cached_property
    def parked(self) -> str:
        return f"{self.base}:parked"

    @cached_property
    def inflight(self) -> str:
        return f"{self.base}:inflight"

    @cached_property
    def pmeta(self) -> str:
        return f"{self.base}:pmeta"

    @cached_property
    def tokens(self) -> str:
        return f"{self.base}:tokens"

    @cached_property
    def messages(self) -> str:
        return f"{self.base}:msgs"

    def state_guard(self, task_id: str) -> str:
        return f"{self.base}:state:{task_id}"

    def park_script_keys(self, cluster: bool) -> list[str]:
        """KEYS of the park scripts, in the order includes/park_keys.lua documents (the
        index and the total are in another slot, so left out on a cluster)."""
        return list(self._in_slot if cluster else self._all_park_keys)

    @cached_property
    def _in_slot(self) -> tuple[str, ...]:
        rate = RateKeys(self.prefix, self.name)
        return (
            *self._lease_keys,
            self.park,
            self.parked,
            self.inflight,
            self.pmeta,
            self.tokens,
            rate.rate,
            rate.pause,
            rate.started,
            self.messages,
        )

    @cached_property
    def _all_park_keys(self) -> tuple[str, ...]:
        return (
            *self._in_slot,
            park_index(self.prefix),
            park_total(self.prefix),
            held_index(self.prefix),
        )


@dataclass(frozen=True)
class RateKeys(LeaseKeys):
    """The keys of one name's rate limit, beside its lease set (same hash tag)."""

    @cached_property
    def rate(self) -> str:
        return f"{self.base}:rate"

    @cached_property
    def pause(self) -> str:
        return f"{self.base}:pause"

    @cached_property
    def started(self) -> str:
        return f"{self.base}:started"


@lru_cache(maxsize=4096)
def lease_keys(prefix: str, name: str, indexed: bool = False) -> LeaseKeys:
    """The keys of a lease set, each name computed once per process: the names
    depend on ``prefix`` and ``name`` alone, and a run uses them several times."""
    return LeaseKeys(prefix, name, indexed)


@lru_cache(maxsize=4096)
def park_keys(prefix: str, name: str) -> ParkKeys:
    """The keys of a name's park, computed once per process (as :func:`lease_keys`)."""
    return ParkKeys(prefix, name)


def park_index(prefix: str) -> str:
    """The index of names with parked or in-flight work (its own slot on a cluster)."""
    return f"{prefix}:{{park:index}}"


def held_index(prefix: str) -> str:
    """The index of names that may have a live lease: name -> the latest lease
    expiry granted or renewed (Redis time, ms), kept by the scripts of indexed
    lease sets (includes/index_held.lua, includes/unindex_held.lua) on a single
    server."""
    return f"{prefix}:{{held:index}}"


def park_wake_channel(prefix: str) -> str:
    """The channel a park script publishes on when a name's time becomes the
    index's earliest (sweepers listen, so they can sleep until then)."""
    return f"{park_index(prefix)}:wake"


def limits_to_wake(prefix: str) -> str:
    """The listed limits whose waiting keys the sweepers wake at their next
    pass (a run-time override of the name changed: limit_changed.lua)."""
    return f"{park_index(prefix)}:limits"


def park_total(prefix: str) -> str:
    """The count of tasks parked over all names (kept by the park scripts)."""
    return f"{prefix}:{{park:index}}:total"


def revoke_record(prefix: str, task_id: str) -> str:
    """The record that a parked or promoted task was revoked (kept 7 days)."""
    return f"{prefix}:park-revoked:{task_id}"


@dataclass(frozen=True)
class LiveKeys:
    """The statements of the worker processes of one process space (liveness.py)."""

    prefix: str
    space: str

    @cached_property
    def index(self) -> str:
        return f"{self.prefix}:{{live:{self.space}}}"

    def record(self, process: str) -> str:
        return f"{self.index}:{process}"
