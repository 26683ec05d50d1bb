"""The Lua scripts, loaded from ``lua/*.lua`` and run with EVALSHA.

``acquire``, ``release`` and ``inspect`` are each prefixed with
``common.lua`` (shared key layout and helpers); ``refresh`` stands alone.
Every operation on shared state is exactly one of these scripts, so it is
atomic and costs one round trip.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from .acl import explain

__all__ = ["ACQUIRE", "INSPECT", "REFRESH", "RELEASE", "TOUCH_FENCE", "LuaScript"]


def _read(name: str) -> str:
    return resources.files("celery_redislock").joinpath("lua").joinpath(name).read_text("utf-8")


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
            clearer = explain(exc, self.name, self.source, [_text(k) for k in keys])
            if clearer is None:
                raise
            raise clearer from exc

    def queue(self, pipeline: Any, keys: Sequence[str | bytes], args: list[Any]) -> None:
        """Queue on a pipeline (run :meth:`ensure_loaded` on its client first)."""
        pipeline.evalsha(self.sha, len(keys), *keys, *args)

    def ensure_loaded(self, client: Any) -> None:
        client.script_load(self.source)


def _with_common(name: str) -> LuaScript:
    return LuaScript(name, _read("common.lua") + "\n" + _read(name))


ACQUIRE = _with_common("acquire.lua")
RELEASE = _with_common("release.lua")
INSPECT = _with_common("inspect.lua")
REFRESH = LuaScript("refresh.lua", _read("refresh.lua"))
TOUCH_FENCE = LuaScript("touch_fence.lua", _read("touch_fence.lua"))


def _text(key: str | bytes) -> str:
    return key.decode("utf-8") if isinstance(key, bytes) else key
