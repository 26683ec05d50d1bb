"""``celery redislock``: see and release the locks and semaphores in Redis.

Registered as a Celery sub-command through the ``celery.commands`` entry
point, so it reads the same app configuration as the workers::

    celery -A proj redislock status                 # held locks/semaphores, waiters
    celery -A proj redislock status --json          # the same, for machines
    celery -A proj redislock status --match 'account:*'
    celery -A proj redislock status --top 10 --watch 2  # the busiest keys, live
    celery -A proj redislock release report:42      # asks for confirmation
    celery -A proj redislock release report:42 --owner <owner> --force
    celery -A proj redislock pause api:acme 30      # no task of the key starts for 30 s
    celery -A proj redislock resume api:acme
    celery -A proj redislock limit set account:42 --limit 20 --rate 500/m
    celery -A proj redislock limit clear account:42  # back to the code's values
    celery -A proj redislock limit show              # every override in force
    celery -A proj redislock exporter --port 9809    # Redis-side gauges for Prometheus

The Redis and key prefix are the app's ``redislock_url`` (default: its Redis
broker) and ``redislock_prefix``; ``--url``, ``--prefix`` and
``--master-name`` (for a ``sentinel://`` URL) override them, given before or
after the sub-command.

Every mistake (bad URL or option, unknown name, Redis refusing) is one line
on stderr naming what was wrong, password masked, exit status 2; a Redis,
Cluster or Sentinel that cannot be reached is one line and exit status 1.
Listing uses SCAN (never KEYS), so it is safe on a large production keyspace.

``release`` frees the slot in Redis (handing it to the next waiter); it does
not stop the task that held it.  That task's heartbeat notices the loss at
its next beat.  Revoke the task too (``celery -A proj control revoke <id>``)
if it must not go on.

The group and its sub-commands are here; finding the Redis and reporting
mistakes in :mod:`celery_redislock.admin.target`, the text output in
:mod:`celery_redislock.admin.format`, ``status --top`` in :mod:`celery_redislock.admin.top`.
"""

from __future__ import annotations

import fnmatch
import json
import sys
import time
from dataclasses import replace
from typing import Any

import click

from .. import parking
from ..core.inspection import force_release, inspect_names, snapshot
from ..core.keys import LeaseKeys, validate_name
from ..core.override import Overrides, overridden_names
from ..core.park import wake
from ..core.rate import RateLimiter, parse_rate
from .alive import statement_ages
from .format import format_parked, format_snapshot, who
from .gauges import RedisGauges
from .target import (
    MASTER_HELP,
    PREFIX_HELP,
    SECONDS,
    URL_HELP,
    Given,
    Mistake,
    OneLineGroup,
    Target,
    connection_options,
    redis_errors,
)
from .top import show_top

__all__ = ["redislock"]


@click.group(name="redislock", cls=OneLineGroup)
@click.option("--url", help=URL_HELP)
@click.option("--prefix", help=PREFIX_HELP)
@click.option("--master-name", help=MASTER_HELP)
@click.pass_context
def redislock(
    ctx: click.Context,
    /,
    url: str | None,
    prefix: str | None,
    master_name: str | None,
    **_: Any,
) -> None:
    """Inspect and release celery-redislock locks and semaphores."""
    ctx.obj = Given(getattr(ctx.obj, "app", None), url, prefix, master_name)


@redislock.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--match", default="*", show_default=True, help="Glob on lock names.")
@click.option(
    "--waiters",
    "max_waiters",
    default=5,
    show_default=True,
    type=click.IntRange(min=0),
    help="Waiters listed per name in text output (--json lists all).",
)
@click.option(
    "--top",
    "top",
    type=click.IntRange(min=1),
    help="Only the N busiest keys, one line each (docs/cli.md).",
)
@click.option(
    "--watch",
    "every",
    type=SECONDS,
    help="With --top: redraw every S seconds until Ctrl-C.",
)
@connection_options
def status(
    target: Target,
    as_json: bool,
    match: str,
    max_waiters: int,
    top: int | None,
    every: float | None,
) -> None:
    """List held locks and semaphores: holders, fencing tokens, ages, waiters."""
    if every is not None and top is None:
        raise Mistake("--watch goes with --top N")
    if top is not None:
        show_top(target, top, every, match, as_json)
        return
    with redis_errors(target):
        snap = snapshot(target.client, target.prefix, match)
        parked = [
            r
            for r in parking.status(target.client, target.prefix)
            if fnmatch.fnmatchcase(r.name, match)
        ]
        stated = statement_ages(target.client, target.prefix, snap.lease_sets)
    snap = replace(snap, lease_sets=tuple(target.with_limits(snap.lease_sets)))
    if as_json:
        body = {
            "url": target.url,
            **snap.as_dict(),
            "parked": [vars(r) for r in parked],
            "last_statement_ago": {o: a.ago for o, a in stated.items()},
            "silent": sorted(o for o, a in stated.items() if a.silent),
        }
        click.echo(json.dumps(body, indent=2, sort_keys=True, default=str))
    else:
        click.echo(format_snapshot(snap, target.url, max_waiters, stated))
        for line in format_parked(parked):
            click.echo(line)


@redislock.command(name="parked")
@click.argument("names", nargs=-1)
@click.option("--list", "count", default=0, type=click.IntRange(min=0), help="List N per name.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@connection_options
def parked(target: Target, names: tuple[str, ...], count: int, as_json: bool) -> None:
    """Parked tasks (policy park) per name: count, oldest age, in flight, overdue."""
    for name in names:
        _check_name(name)
    with redis_errors(target):
        rows = parking.status(target.client, target.prefix, list(names) or None, count=count)
    if as_json:
        click.echo(json.dumps([vars(r) for r in rows], indent=2, sort_keys=True, default=str))
    else:
        click.echo("\n".join(format_parked(rows, entries=True)) or "no parked tasks")


@redislock.command(name="discard-parked")
@click.argument("name")
@click.option("--task-id", "task_ids", multiple=True, help="Only this task; repeatable.")
@click.option("-f", "--force", is_flag=True, help="Do not ask for confirmation.")
@connection_options
def discard_parked(target: Target, name: str, task_ids: tuple[str, ...], force: bool) -> None:
    """Discard the parked tasks of NAME (they never run; marked REVOKED)."""
    _check_name(name)
    what = ", ".join(task_ids) if task_ids else "all parked tasks"
    if not force:
        click.confirm(f"discard {what} of {name!r}?", abort=True)
    with redis_errors(target):
        removed = parking.discard(target.client, target.prefix, name, task_ids, app=target.app)
    click.echo(f"discarded {removed} task(s) of {name!r}")


@redislock.command()
@click.argument("name")
@click.argument("seconds", type=SECONDS)
@connection_options
def pause(target: Target, name: str, seconds: float) -> None:
    """No task of NAME starts for SECONDS (an upstream's Retry-After), for
    every worker: parked tasks wait, arriving ones are parked.  A pause only
    lengthens one that is running."""
    limiter = _limiter(target, name)
    with redis_errors(target):
        left = limiter.pause(seconds)
    click.echo(f"paused {name!r} for {left:g} s")


@redislock.command()
@click.argument("name")
@connection_options
def resume(target: Target, name: str) -> None:
    """End the pause of NAME at once: its parked tasks are promoted now."""
    limiter = _limiter(target, name)
    with redis_errors(target):
        left = limiter.paused_for()
        limiter.resume()
        wake(target.client, target.prefix, name)  # its parked work goes on now
    click.echo(f"resumed {name!r}" + (f" ({left:g} s of pause were left)" if left else ""))


@redislock.group(name="limit", cls=OneLineGroup)
def limit() -> None:
    """Override a key's limit or rate at run time (stored in Redis, no deploy)."""


@limit.command(name="set")
@click.argument("name")
@click.option(
    "--limit",
    "slots",
    type=click.IntRange(min=1),
    help="Runs at once (semaphores; a lock stays exclusive).",
)
@click.option("--rate", help='Starts per period: "500/m", "20/s", or a number per second.')
@click.option("--burst", type=click.IntRange(min=1), help="Starts back to back (with --rate; 1).")
@connection_options
def limit_set(
    target: Target, name: str, slots: int | None, rate: str | None, burst: int | None
) -> None:
    """Override NAME's limit and/or rate for every worker and producer, at once;
    what is not given stays as it is.  See docs/rate.md, "Changing a key's limits"."""
    if slots is None and rate is None:
        raise Mistake("give --limit, --rate or both")
    if burst is not None and rate is None:
        raise Mistake("--burst goes with --rate")
    try:
        parsed = None if rate is None else parse_rate(rate, "--rate")
    except (TypeError, ValueError) as exc:
        raise Mistake(str(exc)) from None
    overrides = _overrides(target, name)
    with redis_errors(target):
        now = overrides.set(limit=slots, rate=parsed, burst=burst or 1)
    click.echo(f"{name!r} runs by: {now}")


@limit.command(name="clear")
@click.argument("name")
@click.option("--only", type=click.Choice(["limit", "rate"]), help="Clear only this one.")
@connection_options
def limit_clear(target: Target, name: str, only: str | None) -> None:
    """Back to the values in the code for NAME (or only its limit or rate)."""
    overrides = _overrides(target, name)
    with redis_errors(target):
        now = overrides.clear(only or "all")
    click.echo(f"{name!r} runs by: {now or 'the values in the code'}")


@limit.command(name="show")
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@connection_options
def limit_show(target: Target, names: tuple[str, ...], as_json: bool) -> None:
    """The overrides in force: of NAMES, or every one (SCAN, never KEYS)."""
    with redis_errors(target):
        listed = list(names) or overridden_names(target.client, target.prefix)
        rows = {name: _overrides(target, name).get() for name in listed}
    if as_json:
        body = {
            n: {"limit": o.limit, "rate": o.rate and str(o.rate), "burst": o.burst}
            for n, o in rows.items()
        }
        click.echo(json.dumps(body, indent=2, sort_keys=True))
    else:
        click.echo("\n".join(f"{n}  {o}" for n, o in rows.items()) or "no overrides")


@redislock.command()
@click.option("--port", type=click.IntRange(1, 65535), default=9809, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@connection_options
def exporter(target: Target, port: int, host: str) -> None:
    """Serve the Redis-side gauges (slots in use, keys at their limit, parked
    work, overdue promotions) on
    http://HOST:PORT/metrics for Prometheus, until Ctrl-C (docs/observability.md)."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise Mistake(
            "the exporter needs prometheus-client: pip install 'celery-redislock[metrics]'"
        ) from None
    registry = CollectorRegistry()
    tasks = dict(target.app.tasks) if target.app is not None else {}
    registry.register(RedisGauges(target.client, target.prefix, tasks))
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise Mistake(f"cannot serve on {host}:{port}: {exc}") from None
    try:  # Ctrl-C stops it cleanly, even right after it starts
        click.echo(
            f"serving the Redis-side gauges of {target.url} ({target.origin}), prefix "
            f"{target.prefix!r}, on http://{host}:{port}/metrics (Ctrl-C stops)"
        )
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        click.echo("stopped")


def _check_name(name: str) -> None:
    try:
        validate_name(name)
    except (TypeError, ValueError) as exc:
        raise Mistake(f"bad NAME {name!r}: {exc}") from None


def _overrides(target: Target, name: str) -> Overrides:
    try:
        return Overrides(target.client, name, prefix=target.prefix)
    except (TypeError, ValueError) as exc:
        raise Mistake(f"bad NAME {name!r}: {exc}") from None


def _limiter(target: Target, name: str) -> RateLimiter:
    try:
        return RateLimiter(target.client, name, prefix=target.prefix)
    except (TypeError, ValueError) as exc:
        raise Mistake(f"bad NAME {name!r}: {exc}") from None


@redislock.command()
@click.argument("name")
@click.option(
    "--owner",
    "owners",
    multiple=True,
    help="Release only this holder (owner id from `status`); repeatable. Default: all holders.",
)
@click.option("-f", "--force", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@connection_options
def release(target: Target, name: str, owners: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Force-release the lock or semaphore NAME (exact name, or its full key).

    The freed slots go to the next waiters.  The tasks that held them are not
    stopped: revoke them as well if they must not go on.
    """
    prefix = target.prefix
    parsed = LeaseKeys.parse(name)
    if parsed is not None:  # a full key such as redislock:{report:42}:holders
        prefix, name = parsed.prefix, parsed.name
    try:
        with redis_errors(target):
            state = inspect_names(target.client, prefix, [name])[0]
    except (TypeError, ValueError) as exc:
        raise Mistake(f"bad NAME {name!r}: {exc}") from None
    if not state.holders:
        queued = f" ({len(state.waiters)} waiting)" if state.waiters else ""
        raise Mistake(
            f"unknown key: nothing holds {name!r} under prefix {prefix!r} on "
            f"{target.url}{queued}; `celery redislock status` lists what is held"
        )
    chosen = [h for h in state.holders if not owners or h.owner in owners]
    missing = sorted(set(owners) - {h.owner for h in state.holders})
    if missing:
        raise Mistake(
            f"not a current holder of {name!r}: {', '.join(missing)} "
            f"(holders: {', '.join(h.owner for h in state.holders)})"
        )
    if not force:
        click.echo(f"About to release {len(chosen)} slot(s) of {name!r} ({target.url}):")
        for h in chosen:
            click.echo(f"  token {h.token}  {who(h.owner, h.meta)}  owner {h.owner}")
        click.echo(
            "The task(s) holding them are NOT stopped; they will see the lease lost at their "
            "next heartbeat."
        )
        click.confirm("Release?", abort=True)
    with redis_errors(target):
        released = force_release(target.client, prefix, name, [h.owner for h in chosen])
    # By owner: the released entries are read again, so their ages differ from `chosen`.
    freed = {h.owner for h in released}
    gone = [h for h in chosen if h.owner not in freed]
    if as_json:
        report = {
            "name": name,
            "prefix": prefix,
            "released": [{"owner": h.owner, "token": h.token, **h.meta} for h in released],
            "already_gone": [h.owner for h in gone],
        }
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    for h in released:
        click.echo(f"released {name!r} token {h.token} ({who(h.owner, h.meta)}, owner {h.owner})")
    for h in gone:
        click.echo(f"already gone: {name!r} token {h.token} (owner {h.owner})")


from .web.command import web  # noqa: E402  the live web view (admin/web/command.py)

redislock.add_command(web)


if __name__ == "__main__":  # pragma: no cover - `python -m celery_redislock.admin.cli --url ...`
    sys.exit(redislock())
