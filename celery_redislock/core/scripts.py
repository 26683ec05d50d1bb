"""The Lua scripts, loaded from ``lua/*.lua`` and run with EVALSHA.

As BullMQ's commands: each operation is one script file, whose header lists
its KEYS and ARGV, and each helper it shares with other scripts is one file
``lua/includes/<helper>.lua`` defining one function of that name (or, for
``lease_set_keys``, ``park_keys``, ``now`` and ``inflight_first``, the
names every helper of a lease set or a park reads).  A file declares each
include it names itself with a ``--- @include "includes/<helper>"`` line;
the loader prepends them (recursively, each once, every file after what it
includes) and drops comment and blank lines.  So a script runs exactly what
it names, and a reader of one operation reads its file and the helpers it
lists.  This module is the only place that reads a ``.lua`` file.
Every operation on shared state is exactly one of these scripts, so it is
atomic and costs one round trip.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from .acl import explain

__all__ = [
    "ACQUIRE",
    "DEDUPE_CLAIM",
    "DEDUPE_CLEAR",
    "FENCED_CLAIM",
    "FENCED_WRITE",
    "INSPECT",
    "LIMIT_BLOCK",
    "LIMIT_CHANGED",
    "LIMIT_CHANGED_TAKE",
    "LIMIT_FORGET",
    "LIMIT_RELEASE",
    "LIMIT_WAKE",
    "OVERRIDE",
    "PARK_ARRIVE",
    "PARK_CLAIM",
    "PARK_DROP",
    "PARK_DUE",
    "PARK_ENQUEUE",
    "PARK_HEAD",
    "PARK_HOLD",
    "PARK_INSPECT",
    "PARK_PROMOTE",
    "PARK_RELEASE",
    "PARK_TRY",
    "PARK_UNHOLD",
    "PARK_WAKE",
    "PARK_WHERE",
    "RATE_ACQUIRE",
    "RATE_PAUSE",
    "REFRESH",
    "REFRESH_PREFIX",
    "RELEASE",
    "STATE_FREE",
    "STATE_HOLD",
    "TOUCH_FENCE",
    "LuaScript",
    "text",
]


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("lua").joinpath(name).read_text("utf-8")


@dataclass(frozen=True)
class LuaScript:
    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode("utf-8")).hexdigest())

    def __call__(self, client: Any, keys: Sequence[str | bytes], args: list[Any]) -> Any:
        """Run on ``client`` (a redis-py client), loading the script on NOSCRIPT.

        An ACL denial is re-raised as ``NoPermissionError`` naming the command
        or keys denied (see acl.py).
        """
        try:
            try:
                return client.evalsha(self.sha, len(keys), *keys, *args)
            except NoScriptError:
                client.script_load(self.source)
                return client.evalsha(self.sha, len(keys), *keys, *args)
        except ResponseError as exc:
            clearer = explain(exc, self.name, self.source, [text(k) for k in keys])
            if clearer is None:
                raise
            raise clearer from exc

    def queue(self, pipeline: Any, keys: Sequence[str | bytes], args: list[Any]) -> None:
        """Queue on a pipeline (run :meth:`ensure_loaded` on its client first)."""
        pipeline.evalsha(self.sha, len(keys), *keys, *args)

    def ensure_loaded(self, client: Any) -> None:
        client.script_load(self.source)


_INCLUDE = re.compile(r'^--- @include "([\w/]+)"$', re.MULTILINE)
_COMMENT_OR_BLANK = re.compile(r"^\s*(--.*)?\n", re.MULTILINE)


def includes(name: str, read: Callable[[str], str] = _read) -> list[str]:
    """The files ``name`` declares with ``--- @include "includes/<helper>"``,
    resolved recursively: each once, every file after the ones it includes,
    ``name`` last."""
    order: list[str] = []

    def visit(part: str, path: tuple[str, ...]) -> None:
        if part in path:
            raise ValueError(f"Lua include cycle: {' -> '.join((*path, part))}")
        if part in order:
            return
        for child in _INCLUDE.findall(read(part)):
            visit(f"{child}.lua", (*path, part))
        order.append(part)

    visit(name, ())
    return order


def assembled(name: str, read: Callable[[str], str] = _read) -> str:
    """The text Redis runs for ``name``: the files it includes, then its own,
    without comment lines and blank lines (what the files say is for their
    reader, not for Redis)."""
    return _COMMENT_OR_BLANK.sub("", "\n".join(read(part) for part in includes(name, read)) + "\n")


def _script(name: str) -> LuaScript:
    return LuaScript(name, assembled(name))


ACQUIRE = _script("acquire.lua")
RELEASE = _script("release.lua")
INSPECT = _script("inspect.lua")
REFRESH = _script("refresh.lua")
REFRESH_PREFIX = _script("refresh_prefix.lua")
TOUCH_FENCE = _script("touch_fence.lua")
DEDUPE_CLAIM = _script("dedupe_claim.lua")
DEDUPE_CLEAR = _script("dedupe_clear.lua")
FENCED_WRITE = _script("fenced_write.lua")
FENCED_CLAIM = _script("fenced_claim.lua")
PARK_ENQUEUE = _script("park_enqueue.lua")
PARK_ARRIVE = _script("park_arrive.lua")
PARK_TRY = _script("park_try.lua")
PARK_HEAD = _script("park_head.lua")
PARK_CLAIM = _script("park_claim.lua")
PARK_PROMOTE = _script("park_promote.lua")
PARK_UNHOLD = _script("park_unhold.lua")
PARK_HOLD = _script("park_hold.lua")
LIMIT_BLOCK = _script("limit_block.lua")
LIMIT_CHANGED = _script("limit_changed.lua")
LIMIT_CHANGED_TAKE = _script("limit_changed_take.lua")
LIMIT_WAKE = _script("limit_wake.lua")
LIMIT_FORGET = _script("limit_forget.lua")
LIMIT_RELEASE = _script("limit_release.lua")
PARK_RELEASE = _script("park_release.lua")
PARK_DROP = _script("park_drop.lua")
PARK_INSPECT = _script("park_inspect.lua")
PARK_DUE = _script("park_due.lua")
PARK_WAKE = _script("park_wake.lua")
PARK_WHERE = _script("park_where.lua")
STATE_HOLD = _script("state_hold.lua")
STATE_FREE = _script("state_free.lua")
RATE_ACQUIRE = _script("rate_acquire.lua")
RATE_PAUSE = _script("rate_pause.lua")
OVERRIDE = _script("override.lua")
LIVE_REGISTER = _script("live_register.lua")
LIVE_FORGET = _script("live_forget.lua")
LIVE_LIST = _script("live_list.lua")


def text(value: str | bytes) -> str:
    """A Redis reply (bytes unless the client decodes) as text."""
    return value.decode("utf-8") if isinstance(value, bytes) else value
