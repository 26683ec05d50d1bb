"""Key layout and validation of names.

All keys of one lock or semaphore share the hash tag ``{name}``, so a lease
set lives in one Redis Cluster slot and every script touches one slot only::

    <prefix>:{<name>}:holders   ZSET  owner -> lease expiry (Redis time, ms)
    <prefix>:{<name>}:info      HASH  owner -> token, acquired time, ttl, meta
    <prefix>:{<name>}:fence     STR   last fencing token (expires 10 min after use)
    <prefix>:{<name>}:queue     ZSET  waiting owner -> arrival
    <prefix>:{<name>}:qinfo     HASH  waiting owner -> wait lease, ttl, meta
    <prefix>:{<name>}:wake:<owner>  LIST  hand-off signal for one waiter
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_PREFIX", "MAX_NAME_LENGTH", "LeaseKeys", "validate_name", "validate_prefix"]

DEFAULT_PREFIX = "redislock"
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
    """The Redis keys of one lock or semaphore."""

    prefix: str
    name: str

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.name}}}"

    @property
    def holders(self) -> str:
        return f"{self.base}:holders"

    @property
    def info(self) -> str:
        return f"{self.base}:info"

    @property
    def fence(self) -> str:
        return f"{self.base}:fence"

    @property
    def queue(self) -> str:
        return f"{self.base}:queue"

    @property
    def qinfo(self) -> str:
        return f"{self.base}:qinfo"

    @property
    def wake_prefix(self) -> str:
        return f"{self.base}:wake:"

    def wake(self, owner: str) -> str:
        return self.wake_prefix + owner

    def script_keys(self) -> list[str]:
        """KEYS of acquire/release/inspect, in the order common.lua documents."""
        return [self.holders, self.info, self.fence, self.queue, self.qinfo, self.wake_prefix]

    @classmethod
    def parse(cls, key: str) -> LeaseKeys | None:
        """The lease set a key such as ``prefix:{name}:holders`` belongs to, if any."""
        open_, close = key.find(":{"), key.find("}:")
        if open_ <= 0 or close < open_:
            return None
        return cls(key[:open_], key[open_ + 2 : close])
