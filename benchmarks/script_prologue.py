"""``python -m benchmarks.script_prologue``: what a script call costs Redis
before its first line of work.

Every call of a script runs its whole text: ``TIME``, the keys and constants,
and a closure for every helper it includes (``lua/includes/``, the ones it
names).  Redis Functions (7.0+) would build a library's helpers once, when
it is loaded, so this prologue less ``TIME`` is the most they could save per
call.  Each shipped script is cut where its own file's code begins, ends with
``return 1`` and is called as its callers call it (same number of KEYS and
ARGV); two controls show the floor: a script that only returns, and one that
only calls ``TIME``.  Redis-measured (``INFO commandstats``, usec of
``evalsha``), medians of interleaved rounds.  Speed is reported, never asserted.
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


def per_call(client: redis.Redis, body: str, keys: int, args: int, calls: int) -> float:
    sha = client.script_load(body)
    names = [f"prologue:{{bench}}:{i}" for i in range(keys)]
    argv = ["bench"] + ["1"] * (args - 1)
    client.config_resetstat()
    for _ in range(calls):
        client.evalsha(sha, keys, *names, *argv)
    stats = client.info("commandstats")["cmdstat_evalsha"]
    return float(stats["usec"]) / int(stats["calls"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--url", help="an existing Redis (default: a throwaway redis-server)")
    opts = parser.parse_args(argv)
    bodies = {label: (body, 8, 6) for label, body in CONTROLS.items()}
    bodies.update({f"{name} prologue": (prologue(name), *shape) for name, shape in SHIPPED.items()})
    with common.redis_at(opts.url) as url:
        client = redis.Redis.from_url(url)
        times: dict[str, list[float]] = {label: [] for label in bodies}
        for _ in range(opts.rounds):
            for label, (body, keys, args) in bodies.items():
                times[label].append(per_call(client, body, keys, args, opts.calls))
    print("| script | us per call (Redis-measured) |\n|---|---|")
    for label, values in times.items():
        print(f"| {label} | {statistics.median(values):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
