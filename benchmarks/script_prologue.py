"""``python -m benchmarks.script_prologue``: what a script call costs Redis
before its first line of work.

Every call of a script runs its whole text: ``TIME``, the keys and constants,
and a closure for every helper it includes (``lua/includes/``, the ones it
names).  Redis Functions (7.0+) would build a library's helpers once, when
it is loaded, so this prologue less ``TIME`` is the most they could save per
call.  Each shipped script is cut where its own file's code begins, ends with
``return 1`` and is called as its callers call it (same number of KEYS and
ARGV); two controls show the floor: a script that only returns, and one that
only calls ``TIME``.  Beside each, on a server with Functions (7.0+), the
same prologue as our library runs it (core/scripts.py): the helpers built
once at load, each call running only the includes' per-call blocks
(``... as a function``).  Redis-measured (``INFO commandstats``, usec of
``evalsha`` or ``fcall``), medians of interleaved rounds.  Speed is reported,
never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import redis

from celery_redislock.core import scripts

from . import common

#: script -> (number of KEYS, number of ARGV) its callers pass
SHIPPED = {
    "acquire.lua": (8, 6),
    "release.lua": (8, 2),
    "park_enqueue.lua": (19, 11),
    "park_claim.lua": (19, 8),
    "park_release.lua": (19, 8),
}
CONTROLS = {
    "control: return only": "return 1\n",
    "control: TIME only": ("local t = redis.call('TIME')\nreturn 1\n"),
}


def prologue(name: str) -> str:
    """The text Redis runs for ``name`` up to its own file's first line of code."""
    source = getattr(scripts, name.removesuffix(".lua").upper()).source
    own = [line.strip() for line in scripts._read(name).splitlines()]
    first = next(line for line in own if line and not line.startswith("--"))
    return source[: source.index(first[:40])] + "return 1\n"


def prologue_library() -> scripts.FunctionLibrary:
    """The shipped scripts as our library, each cut as :func:`prologue` cuts it:
    its includes, then ``return 1`` (function ``<library>_<script>``)."""

    def read(part: str) -> str:
        text = scripts._read(part)
        if part not in SHIPPED:
            return text
        lines = [line for line in text.splitlines() if line.startswith("--- @include")]
        return "".join(line + "\n" for line in lines) + "return 1\n"

    return scripts.FunctionLibrary(list(SHIPPED), read)


def per_call(
    client: redis.Redis, body: str, keys: int, args: int, calls: int, function: str = ""
) -> float:
    """Redis-measured usec per call of ``body`` by EVALSHA, or (``function``
    given) of that function of a loaded library by FCALL."""
    sha = "" if function else client.script_load(body)
    names = [f"prologue:{{bench}}:{i}" for i in range(keys)]
    argv = ["bench"] + ["1"] * (args - 1)
    client.config_resetstat()
    for _ in range(calls):
        if function:
            client.fcall(function, keys, *names, *argv)
        else:
            client.evalsha(sha, keys, *names, *argv)
    stats = client.info("commandstats")["cmdstat_fcall" if function else "cmdstat_evalsha"]
    return float(stats["usec"]) / int(stats["calls"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--url", help="an existing Redis (default: a throwaway redis-server)")
    opts = parser.parse_args(argv)
    bodies = {label: (body, 8, 6, "") for label, body in CONTROLS.items()}
    library = prologue_library()
    with common.redis_at(opts.url) as url:
        client = redis.Redis.from_url(url)
        functions = int(str(client.info("server")["redis_version"]).split(".")[0]) >= 7
        if functions:
            client.function_load(library.text, replace=True)
        for name, (keys, args) in SHIPPED.items():
            bodies[f"{name} prologue"] = (prologue(name), keys, args, "")
            if functions:
                bodies[f"{name} prologue, as a function"] = ("", keys, args, library.function(name))
        times: dict[str, list[float]] = {label: [] for label in bodies}
        for _ in range(opts.rounds):
            for label, (body, keys, args, function) in bodies.items():
                times[label].append(per_call(client, body, keys, args, opts.calls, function))
    print("| script | us per call (Redis-measured) |\n|---|---|")
    for label, values in times.items():
        print(f"| {label} | {statistics.median(values):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
