"""``celery redislock status --top N [--watch S]``: the busiest keys, refreshed.

One frame reads every lock, semaphore and rate key with holders or waiters
(the SCAN of :func:`~celery_redislock.core.inspection.snapshot`, never
``KEYS``) and every key with parked or promoted work (the park's index), then
ranks them, busiest first, by::

    (parked, held + reserved, waiting, oldest parked age)   all descending

and the name for ties.  Per key it shows: held (running holders, not park
reservations) over the key's limit when known, reserved (slots kept for
promoted tasks whose message is on its way), waiting (FIFO waiters of the
``wait`` policy), parked, the oldest parked task's age, the pause left and
when the head of its park is next due.  A key that is only paused (nothing
held, waiting or parked) is not listed.

The limit is the one the key runs by now, when it can be known (see
:mod:`celery_redislock.admin.keyrows`).

``--watch S`` draws a frame every S seconds until Ctrl-C (exit status 0):
in place on a terminal (ANSI clear), else frames separated by a blank line;
``--json`` prints one JSON object per frame, each on one line.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import IO

from .. import parking
from ..core.inspection import snapshot
from ..core.keys import RateKeys
from ..core.override import Overrides
from .keyrows import KeyRow, key_row, rank
from .target import Target, redis_errors

__all__ = ["format_top", "show_top", "top_rows", "watch"]

#: clears a terminal and puts the cursor top left
CLEAR = "\x1b[H\x1b[2J"
ORDER = "parked, held+reserved, waiting, oldest parked age"


def top_rows(target: Target, match: str, count: int) -> tuple[int, list[KeyRow]]:
    """The number of busy keys matching ``match``, and the ``count`` busiest."""
    with redis_errors(target):
        states = {s.name: s for s in snapshot(target.client, target.prefix, match).lease_sets}
        parks = {
            p.name: p
            for p in parking.status(target.client, target.prefix)
            if fnmatch.fnmatchcase(p.name, match)
        }
        states = {s.name: s for s in target.with_limits(states.values())}
        rows = rank(key_row(n, states.get(n), parks.get(n), None) for n in {*states, *parks})
        # The limit and pause of the rows shown only: one override read and
        # one PTTL each (a parked key's come with its park).
        shown = []
        for row in rows[:count]:
            park = parks.get(row.name)
            override = None
            if park is None or park.limit is None:
                override = Overrides(target.client, row.name, target.prefix).get().limit
            row = key_row(row.name, states.get(row.name), park, override)
            if park is None:
                pttl = target.client.pttl(RateKeys(target.prefix, row.name).pause)
                row = replace(row, paused_for=max(int(pttl), 0) / 1000)
            shown.append(row)
    return len(rows), shown


def _age(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def format_top(rows: list[KeyRow], total: int, url: str, prefix: str, every: float = 0) -> str:
    """One text frame: a heading line and a table (no blank line in it)."""
    where = f"under prefix {prefix!r} on {url}"
    watching = f"; every {every:g}s, Ctrl-C to stop" if every else ""
    stamp = time.strftime("%H:%M:%S  ") if every else ""
    if not rows:
        return f"{stamp}nothing held, waiting or parked {where}{watching}"
    table = [
        ("KEY", "KIND", "HELD", "RESERVED", "WAITING", "PARKED", "OLDEST", "PAUSED", "NEXT DUE")
    ]
    for r in rows:
        table.append(
            (
                r.name,
                r.kind,
                f"{r.held}/{r.limit}" if r.limit else str(r.held),
                str(r.reserved),
                str(r.waiting),
                str(r.parked),
                _age(r.oldest_parked_age),
                _age(r.paused_for or None),
                f"{r.next_due_in:.3f}s" if r.next_due_in else "-",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [
        f"{stamp}top {len(rows)} of {total} busy key(s) {where}, busiest first "
        f"by ({ORDER}){watching}"
    ]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    ]
    return "\n".join(lines)


def top_json(rows: list[KeyRow], url: str, prefix: str) -> str:
    """One JSON frame, on one line."""
    return json.dumps(
        {"url": url, "prefix": prefix, "top": [asdict(r) for r in rows]}, sort_keys=True
    )


def watch(
    frame: Callable[[], str],
    every: float,
    out: IO[str],
    clear: bool,
    sleep: Callable[[float], None] = time.sleep,
    separator: str = "\n",
) -> None:
    """Write ``frame()`` every ``every`` seconds until Ctrl-C, which ends it
    quietly; ``clear``: each frame replaces the last (a terminal), else frames
    follow each other, ``separator`` between two."""
    first = True
    try:
        while True:
            text = frame()
            out.write((CLEAR if clear else "" if first else separator) + text + "\n")
            out.flush()
            first = False
            sleep(every)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `... --watch 1 | head`: the reader is gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def show_top(target: Target, count: int, every: float | None, match: str, as_json: bool) -> None:
    """What ``status --top COUNT [--watch EVERY]`` prints (to stdout)."""

    def frame() -> str:
        total, rows = top_rows(target, match, count)
        if as_json:
            return top_json(rows, target.url, target.prefix)
        return format_top(rows, total, target.url, target.prefix, every or 0)

    out = sys.stdout
    if every is None:
        out.write(frame() + "\n")
        return
    tty = out.isatty() and not as_json
    watch(frame, every, out, clear=tty, separator="" if as_json else "\n")
