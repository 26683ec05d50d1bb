"""The Lua scripts, loaded from ``lua/*.lua``, run as Redis Functions or by EVALSHA.

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

**How a script runs.**  On a Redis or Valkey that has Functions (7.0+) and
a user allowed ``FCALL`` and ``FUNCTION LOAD``, every script is a function
of one library (:data:`LIBRARY`): the helpers are built once, when the
library is loaded, instead of at every call, which is most of what a call
costs before its first command (``python -m benchmarks.script_prologue``).
Elsewhere (Redis 6.2, a ``RedisCluster`` client, an ACL that grants only ``EVALSHA``)
the same text runs by ``EVALSHA``.  Either way one call runs the same
statements in the same order: an include's per-call state (the call's keys,
its Redis time, what it has read once) is set in a block between
``--- @per_call begin`` and ``--- @per_call end``, which an ``EVALSHA``
script runs where it stands and a function runs first, for each include the
script names, in the same order.  Nothing else in an include may change
between calls: outside those blocks, an include declares constants and
functions only (tests/core/test_functions.py checks it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, OutOfMemoryError, ReadOnlyError, ResponseError

from .acl import explain

__all__ = [
    "ACQUIRE",
    "DEDUPE_CLAIM",
    "DEDUPE_CLEAR",
    "FENCED_CLAIM",
    "FENCED_WRITE",
    "INSPECT",
    "LIBRARY",
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
    "FunctionLibrary",
    "LuaScript",
    "text",
]


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("lua").joinpath(name).read_text("utf-8")


# FCALL or FUNCTION LOAD itself unknown (Redis < 7.0) or denied by the ACL: nothing ran.  Only
# these: an error from inside a function that had written could not be sent again.
_NO_FUNCTIONS = re.compile(
    r"unknown command [`'](?:fcall|function)[`']|unknown subcommand [`']load[`']"
    r"|no permissions to run the '(?:fcall|function\|load)' command",
    re.IGNORECASE,
)
_FUNCTION_NOT_FOUND = re.compile(r"^Function not found", re.IGNORECASE)
# Refused before a function (which declares no flags) runs, where a script sent by EVALSHA
# runs until its first command that needs what is missing (memory, a writable primary, a
# working disk, replicas): such a call is sent again by EVALSHA, so that it does what it
# did before functions (a release under maxmemory still frees its lease).  Inside a
# function these come only before its first write, so nothing ran twice.
_REFUSED_UP_FRONT = re.compile(r"^(?:OOM|READONLY|MISCONF|NOREPLICAS)\b")


class _FunctionsUnavailable(Exception):
    """This call goes by EVALSHA (and, when the library refused the pool, every later one)."""


def _refused_up_front(exc: object) -> bool:
    return isinstance(exc, (OutOfMemoryError, ReadOnlyError)) or (
        isinstance(exc, ResponseError) and bool(_REFUSED_UP_FRONT.search(str(exc)))
    )


def _not_loaded(reply: object) -> bool:
    """Whether ``reply`` (an error from a script call, e.g. in a pipeline) says
    the script or function is not loaded on the server (a restart, a flush)."""
    return isinstance(reply, NoScriptError) or (
        isinstance(reply, ResponseError) and bool(_FUNCTION_NOT_FOUND.search(str(reply)))
    )


class FunctionLibrary:
    """The scripts as one Redis Functions library (``#!lua name=...``).

    Each include is in it once, its per-call block made a function; each
    script is a function named ``<library>_<script>`` that runs the per-call
    blocks of what it includes, then its own text.  The library's name
    carries a hash of its text, so two versions of this package on one server
    never replace each other's functions.

    Guaranteed: a client whose server or user cannot run functions is told
    so by the server before anything runs (an unknown or denied command), and
    from then on this process calls that connection pool's scripts by
    ``EVALSHA``.  A ``RedisCluster`` client goes by ``EVALSHA``: redis-py
    asks the server for the keys of every ``FCALL`` it routes (one more round
    trip), and of every ``EVALSHA`` it reads them itself (the heartbeat's
    pipelines to each node are plain clients, which use functions).  Grant a
    restricted user both ``FCALL`` and ``FUNCTION LOAD``, or neither.
    """

    def __init__(self, names: Sequence[str], read: Callable[[str], str] = _read) -> None:
        self.text, self.name = _library(names, read)
        # ids of the connection pools told "no functions" (an id a later pool
        # reuses sends that pool by EVALSHA, which always works)
        self.refused: set[int] = set()

    def function(self, script: str) -> str:
        return f"{self.name}_{_stem(script)}"

    def usable(self, client: Any) -> bool:
        """Whether ``client`` calls functions (see the class docstring)."""
        return id(getattr(client, "connection_pool", client)) not in self.refused and not hasattr(
            client, "get_node_from_key"
        )

    def refuse(self, client: Any) -> None:
        """From now on, ``client``'s connection pool goes by EVALSHA."""
        self.refused.add(id(getattr(client, "connection_pool", client)))

    def load(self, client: Any) -> None:
        """``FUNCTION LOAD REPLACE`` (the name says the version, so it replaces
        only itself).  Raises :class:`_FunctionsUnavailable` if it fails (a
        load that failed ran nothing): for good where the server or user has
        no functions, else (out of memory, say) for this call."""
        try:
            client.function_load(self.text, replace=True)
        except ResponseError as exc:
            if _NO_FUNCTIONS.search(str(exc)):
                self.refuse(client)
            raise _FunctionsUnavailable from exc

    def after(self, exc: ResponseError, client: Any) -> None:
        """What an FCALL's ``exc`` means: the library is loaded again (it was
        lost) and the caller calls again; :class:`_FunctionsUnavailable`
        (refused before it ran: see ``_NO_FUNCTIONS``, ``_REFUSED_UP_FRONT``);
        any other error is raised."""
        if _FUNCTION_NOT_FOUND.search(str(exc)):
            self.load(client)
            return
        if _NO_FUNCTIONS.search(str(exc)):
            self.refuse(client)
            raise _FunctionsUnavailable from exc
        if _refused_up_front(exc):
            raise _FunctionsUnavailable from exc
        raise exc


@dataclass(frozen=True)
class LuaScript:
    """One script: its ``EVALSHA`` text and, when it is part of ``library``,
    its function there (see :class:`FunctionLibrary`)."""

    name: str
    source: str
    library: FunctionLibrary | None = field(default=None, compare=False, repr=False)
    sha: str = field(init=False)
    function: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode("utf-8")).hexdigest())
        library = self.library
        object.__setattr__(self, "function", library.function(self.name) if library else "")

    def __call__(self, client: Any, keys: Sequence[str | bytes], args: list[Any]) -> Any:
        """Run on ``client`` (a redis-py client), loading the script (or the
        library) when the server does not have it.

        An ACL denial is re-raised as ``NoPermissionError`` naming the command
        or keys denied (see acl.py).
        """
        library, source = self.library, self.source
        try:
            # FunctionLibrary.usable, written out: this is every script call's path
            if (
                library is not None
                and id(getattr(client, "connection_pool", client)) not in library.refused
                and not hasattr(client, "get_node_from_key")
            ):
                source = library.text
                try:
                    return client.fcall(self.function, len(keys), *keys, *args)
                except ResponseError as exc:
                    try:
                        library.after(exc, client)
                        return client.fcall(self.function, len(keys), *keys, *args)
                    except _FunctionsUnavailable:
                        source = self.source
            try:
                return client.evalsha(self.sha, len(keys), *keys, *args)
            except NoScriptError:
                client.script_load(self.source)
                return client.evalsha(self.sha, len(keys), *keys, *args)
        except ResponseError as exc:
            clearer = explain(exc, self.name, source, [text(k) for k in keys])
            if clearer is None:
                raise
            raise clearer from exc

    def pipelined(
        self, client: Any, calls: Sequence[tuple[Sequence[str | bytes], list[Any]]]
    ) -> list[Any]:
        """Each of ``calls`` (keys, args) on ``client`` in one pipeline (not a
        transaction): the replies in order, an error as its exception.

        A pipeline in which calls found the script or library missing, or
        functions refused (those calls did not run), is loaded or turned to
        EVALSHA and sent again, whole, at most twice: so use it for calls
        that may run twice (a renewal, a read)."""
        by_evalsha = False
        for attempt in (1, 2, 3):
            library = self.library
            if by_evalsha or (library is not None and not library.usable(client)):
                library = None
            pipe = client.pipeline(transaction=False)
            for keys, args in calls:
                if library is not None:
                    pipe.fcall(self.function, len(keys), *keys, *args)
                else:
                    pipe.evalsha(self.sha, len(keys), *keys, *args)
            replies = list(pipe.execute(raise_on_error=False))
            errors = [r for r in replies if isinstance(r, ResponseError)]
            if attempt == 3 or not errors:
                return replies
            if library is not None and any(_NO_FUNCTIONS.search(str(r)) for r in errors):
                library.refuse(client)
            elif library is not None and any(_refused_up_front(r) for r in errors):
                by_evalsha = True
            elif not any(_not_loaded(r) for r in errors):
                return replies
            elif library is not None:
                try:
                    library.load(client)
                except _FunctionsUnavailable:
                    by_evalsha = True
                    client.script_load(self.source)
            else:
                client.script_load(self.source)
        raise AssertionError("unreachable")


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


_PER_CALL = re.compile(r"^--- @per_call begin\n(.*?)^--- @per_call end\n", re.MULTILINE | re.DOTALL)
_LIBRARY_NAME = "@LIBRARY@"


def _stem(name: str) -> str:
    return name.rsplit("/", 1)[-1].removesuffix(".lua")


def _library(names: Sequence[str], read: Callable[[str], str] = _read) -> tuple[str, str]:
    """The text and name of the library of ``names`` (see :class:`FunctionLibrary`)."""
    parts: list[str] = []
    for name in names:
        parts += [part for part in includes(name, read)[:-1] if part not in parts]
    per_call: dict[str, str] = {}
    chunks: list[str] = []
    for part in parts:
        text = read(part)
        blocks = list(_PER_CALL.finditer(text))
        if len(blocks) > 1:
            raise ValueError(f"{part}: more than one --- @per_call block")
        if blocks:
            block, per_call[part] = blocks[0], f"per_call_{_stem(part)}"
            made = f"local function {per_call[part]}(KEYS, ARGV)\n{block.group(1)}end\n"
            text = text[: block.start()] + made + text[block.end() :]
        chunks.append(text)
    for name in names:
        first = "".join(
            f"{per_call[p]}(KEYS, ARGV)\n" for p in includes(name, read)[:-1] if p in per_call
        )
        chunks.append(
            f"redis.register_function('{_LIBRARY_NAME}_{_stem(name)}', function(KEYS, ARGV)\n"
            f"{first}{read(name)}end)\n"
        )
    body = _COMMENT_OR_BLANK.sub("", "\n".join(chunks) + "\n")
    library = "redislock_" + hashlib.sha1(body.encode("utf-8")).hexdigest()[:16]
    return f"#!lua name={library}\n" + body.replace(_LIBRARY_NAME, library), library


_NAMES = (
    "acquire.lua",
    "release.lua",
    "inspect.lua",
    "refresh.lua",
    "refresh_prefix.lua",
    "dedupe_claim.lua",
    "dedupe_clear.lua",
    "fenced_write.lua",
    "fenced_claim.lua",
    "park_enqueue.lua",
    "park_arrive.lua",
    "park_try.lua",
    "park_head.lua",
    "park_claim.lua",
    "park_promote.lua",
    "park_unhold.lua",
    "park_hold.lua",
    "limit_block.lua",
    "limit_changed.lua",
    "limit_changed_take.lua",
    "limit_wake.lua",
    "limit_forget.lua",
    "limit_release.lua",
    "park_release.lua",
    "park_drop.lua",
    "park_inspect.lua",
    "park_due.lua",
    "park_wake.lua",
    "park_where.lua",
    "state_hold.lua",
    "state_free.lua",
    "rate_acquire.lua",
    "rate_pause.lua",
    "override.lua",
    "live_register.lua",
    "live_forget.lua",
    "live_list.lua",
)
#: Every script of :data:`_NAMES` as one library of Redis Functions.
LIBRARY = FunctionLibrary(_NAMES)


def _script(name: str) -> LuaScript:
    return LuaScript(name, assembled(name), LIBRARY if name in _NAMES else None)


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
