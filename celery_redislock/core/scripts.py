"""The Lua scripts, loaded from ``lua/*.lua`` and run with EVALSHA.

Like BullMQ's commands, each operation is one named script file; a script
declares the shared helpers it uses with ``--- @include <file>.lua`` lines,
and the loader prepends them (recursively, each once, includes first):
``common.lua`` (the lease-set keys, the invariant, fencing, promotion) for
``acquire``, ``release`` and ``park_common.lua``, which the park scripts
include.  Each assembled script is then pruned (:func:`pruned`: no comments,
no helper it never names).  This module is the only place that reads a
``.lua`` file.
Every operation on shared state is exactly one of these scripts, so it is
atomic and costs one round trip.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from .acl import explain

__all__ = [
    "ACQUIRE",
    "DEDUPE",
    "FENCED_WRITE",
    "INSPECT",
    "OVERRIDE",
    "PARK_CLAIM",
    "PARK_DROP",
    "PARK_DUE",
    "PARK_ENQUEUE",
    "PARK_INSPECT",
    "PARK_PROMOTE",
    "PARK_RELEASE",
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


_INCLUDE = re.compile(r"^--- @include (\S+\.lua)$", re.MULTILINE)


def includes(name: str) -> list[str]:
    """The files ``name`` declares with ``--- @include``, resolved recursively:
    each once, every file after the ones it includes, ``name`` last."""
    order: list[str] = []

    def visit(part: str, path: tuple[str, ...]) -> None:
        if part in path:
            raise ValueError(f"Lua include cycle: {' -> '.join((*path, part))}")
        if part in order:
            return
        for child in _INCLUDE.findall(_read(part)):
            visit(child, (*path, part))
        order.append(part)

    visit(name, ())
    return order


def _script(name: str) -> LuaScript:
    """The script ``name`` with the files it includes prepended, pruned."""
    return LuaScript(name, pruned("\n".join(_read(part) for part in includes(name))))


_WHOLE_LINE_COMMENT = re.compile(r"^\s*--.*$", re.MULTILINE)
_TRAILING_COMMENT = re.compile(r"(?<=\S)\s+--[^'\"\n]*$", re.MULTILINE)
_DEFINITION = re.compile(r"^local function (\w+)\(")
_ONE_LINER = re.compile(r"\bend\s*$")


def pruned(source: str) -> str:
    """``source`` without comments and without the top-level ``local
    function`` s nothing else in it refers to (repeated until every one left
    is used).  Lua makes a closure of each such function on every call of the
    script, so the helpers an included file defines for other scripts cost
    each call (about 0.1-0.3 us apiece on a 2-core VM): ``park_claim.lua``
    does not need the queue hand-off of ``common.lua``.  Only whole functions
    that are never named go, so what runs is what was written.  A trailing
    comment with a quote in it is kept (it could be inside a string)."""
    lines = _TRAILING_COMMENT.sub("", _WHOLE_LINE_COMMENT.sub("", source)).split("\n")
    while True:
        for name, first, last in _functions(lines):
            rest = "\n".join(lines[:first] + lines[last + 1 :])
            if not re.search(rf"(?<![\w.]){name}\b", rest):
                lines = lines[:first] + lines[last + 1 :]
                break
        else:
            return "\n".join(line for line in lines if line.strip()) + "\n"


def _functions(lines: list[str]) -> list[tuple[str, int, int]]:
    """Top-level ``local function`` definitions: (name, first line, last line);
    a multi-line one ends at the first ``end`` in the first column."""
    found: list[tuple[str, int, int]] = []
    i = 0
    while i < len(lines):
        match = _DEFINITION.match(lines[i])
        if match is None:
            i += 1
            continue
        last = i
        if not _ONE_LINER.search(lines[i]):
            ends = [k for k in range(i + 1, len(lines)) if lines[k] == "end"]
            last = ends[0] if ends else len(lines)
            body = lines[i + 1 : last]
            if last == len(lines) or any(_DEFINITION.match(line) for line in body):
                # Pruning relies on this layout; a script it cannot read fails at import.
                raise ValueError(f"Lua function {match.group(1)}: no 'end' in the first "
                                 "column before the next top-level function")  # fmt: skip
        found.append((match.group(1), i, last))
        i = last + 1
    return found


ACQUIRE = _script("acquire.lua")
RELEASE = _script("release.lua")
INSPECT = _script("inspect.lua")
REFRESH = _script("refresh.lua")
REFRESH_PREFIX = _script("refresh_prefix.lua")
TOUCH_FENCE = _script("touch_fence.lua")
DEDUPE = _script("dedupe.lua")
FENCED_WRITE = _script("fenced_write.lua")
PARK_ENQUEUE = _script("park_enqueue.lua")
PARK_CLAIM = _script("park_claim.lua")
PARK_PROMOTE = _script("park_promote.lua")
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
