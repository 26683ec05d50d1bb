"""``python -m benchmarks.helper_profile``: where the park scripts' Redis time
goes, by Lua helper.

Runs ``benchmarks.park_scripts``' cycle (one name, limit L, every task
enqueued, claimed and released, the release promoting the next) twice
against a throwaway server: once with the library as it is, once with a
probe around every helper an include defines (``local function`` at the top
of ``core/lua/includes/*.lua``).  A probe reads Redis ``TIME`` before and
after its helper and adds the difference, less its callees', to that
helper's *self time*, kept in the loaded library (Redis Functions keep a
library's upvalues between calls) and read back by one more function.  A
probe costs time of its own (two ``TIME`` calls and a table); it is measured
as the difference between the two runs' script time, per probed call, and
taken off each helper's figure as its calls' share.  What is left of the
scripts' time after the helpers is the scripts' own text and the calls
themselves.  Needs Redis Functions (Redis or Valkey 7.0+).  Measured, not
asserted; figures move with the machine's load, so compare within one run.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from . import common
from .park_scripts import _script_usec, cycle

_HELPER = re.compile(r"^local function (\w+)\(", re.MULTILINE)
_DUMP = "helper_profile_dump"
_PROBES = f"""
local probe_self, probe_calls, probe_stack = {{}}, {{}}, {{}}
local function probe_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function probe_pack(...) return {{n = select('#', ...), ...}} end
local function probe(name, helper)
  return function(...)
    probe_stack[#probe_stack + 1] = 0
    local began = probe_now()
    local reply = probe_pack(helper(...))
    local took = probe_now() - began
    local callees = table.remove(probe_stack)
    probe_self[name] = (probe_self[name] or 0) + took - callees
    probe_calls[name] = (probe_calls[name] or 0) + 1
    if #probe_stack > 0 then probe_stack[#probe_stack] = probe_stack[#probe_stack] + took end
    return unpack(reply, 1, reply.n)
  end
end
redis.register_function('{_DUMP}', function()
  local out = {{}}
  for name, us in pairs(probe_self) do
    out[#out + 1] = name .. ' ' .. us .. ' ' .. probe_calls[name]
    probe_self[name], probe_calls[name] = nil, nil
  end
  return out
end)
"""


@contextmanager
def probed_library() -> Iterator[None]:
    """The library's text with a probe around every helper, under the
    library's own name (so the scripts call it), for the block."""
    from celery_redislock.core import scripts

    def read(part: str) -> str:
        text = scripts._read(part)
        if part.startswith("includes/"):
            text += "\n" + "".join(f"{h} = probe('{h}', {h})\n" for h in _HELPER.findall(text))
        return text

    library = scripts.LIBRARY
    text, name = scripts._library(scripts._NAMES, read)
    probed = text.replace("\n", "\n" + _PROBES, 1).replace(name, library.name)
    plain, library.text = library.text, probed
    try:
        yield
    finally:
        library.text = plain


def profile(url: str, limit: int, tasks: int) -> dict[str, Any]:
    """Script time per task with and without probes, and each helper's self
    time and calls per task (probe cost taken off)."""
    client = redis.Redis.from_url(url)
    if int(str(client.info("server")["redis_version"]).split(".")[0]) < 7:
        raise RuntimeError("benchmarks.helper_profile needs Redis Functions (Redis or Valkey 7.0+)")
    runs = {}
    for probed in (False, True):
        client.flushall()
        client.function_flush()
        before = _script_usec(client)
        if probed:
            with probed_library():
                try:
                    cycle(url, limit, tasks)
                    dump = client.fcall(_DUMP, 0)
                finally:
                    client.function_flush()  # the next call loads the plain library
        else:
            cycle(url, limit, tasks)
        runs[probed] = (_script_usec(client) - before) / tasks
    helpers = {}
    for line in dump:
        name, usec, calls = line.decode().split()
        helpers[name] = (int(usec) / tasks, int(calls) / tasks)
    calls = sum(c for _, c in helpers.values())
    per_probe = max(runs[True] - runs[False], 0.0) / max(calls, 1e-9)
    return {
        "script_us_per_task": runs[False],
        "probed_us_per_task": runs[True],
        "probe_us": per_probe,
        "helpers": {
            name: (max(usec - calls * per_probe, 0.0), calls)
            for name, (usec, calls) in helpers.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--url", help="an existing Redis (it is flushed; default: a throwaway)")
    opts = parser.parse_args(argv)
    with common.redis_at(opts.url) as url:
        found = profile(url, opts.limit, opts.tasks)
    helpers = found["helpers"]
    in_helpers = sum(usec for usec, _ in helpers.values())
    scripts_us = found["script_us_per_task"]
    print(
        f"park cycle, limit {opts.limit}, {opts.tasks} tasks: scripts {scripts_us:.1f} us"
        f" per task ({found['probed_us_per_task']:.1f} with probes, {found['probe_us']:.2f} us"
        f" per probed call); helpers' self time {in_helpers:.1f} us, the rest (the"
        f" scripts' own text, the calls) {scripts_us - in_helpers:.1f} us\n"
    )
    print("| helper | self us per task | calls per task |\n|---|---|---|")
    ranked = sorted(helpers.items(), key=lambda item: item[1][0], reverse=True)
    for name, (usec, calls) in ranked[: opts.top]:
        print(f"| `{name}` | {usec:.1f} | {calls:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
