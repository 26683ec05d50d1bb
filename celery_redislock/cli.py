"""``celery redislock``: see and release the locks and semaphores in Redis.

Registered as a Celery sub-command through the ``celery.commands`` entry
point, so it reads the same app configuration as the workers::

    celery -A proj redislock status                 # held locks/semaphores, waiters
    celery -A proj redislock status --json          # the same, for machines
    celery -A proj redislock status --match 'account:*'
    celery -A proj redislock release report:42      # asks for confirmation
    celery -A proj redislock release report:42 --owner <owner> --force

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
"""

from __future__ import annotations

import fnmatch
import functools
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any

import click
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from . import parking
from .core import liveness
from .core.connection import client_from_url, redact
from .core.inspection import (
    LeaseSetState,
    Snapshot,
    force_release,
    inspect_names,
    snapshot,
    task_id_of,
)
from .core.keys import LeaseKeys, validate_prefix
from .diagnose import diagnose, one_line
from .settings import Settings, settings_from_app

__all__ = ["redislock"]


@dataclass(frozen=True)
class Target:
    """Where the command looks: one Redis and one key prefix (and the app)."""

    client: Any
    url: str
    prefix: str
    app: Any = None
    #: where the URL came from, e.g. "setting redislock_url" or "option --url"
    origin: str = "option --url"

    def with_limits(self, states: Iterable[LeaseSetState]) -> list[LeaseSetState]:
        """``states`` with the limit their task classes declare, when the app has them."""
        states = list(states)
        if self.app is not None and states:
            # Task modules listed in the app's imports/include, and autodiscovery.
            with suppress(Exception):
                self.app.loader.import_default_modules()
        return [replace(s, declared_limit=self.declared_limit(s)) for s in states]

    def declared_limit(self, state: LeaseSetState) -> int | None:
        tasks = getattr(self.app, "tasks", None) or {}
        for name in state.task_names:
            limit_of = getattr(tasks.get(name), "redislock_limit", None)
            if callable(limit_of):
                with suppress(Exception):
                    return int(limit_of())
        return None


class Mistake(click.ClickException):
    """A user mistake: one line on stderr, exit status 2."""

    exit_code = 2


class Unreachable(click.ClickException):
    """Redis (or its Cluster or Sentinels) cannot be reached: one line, exit status 1."""

    exit_code = 1


class _OneLineCommand(click.Command):
    """Reports a bad option or argument in one line (no usage block)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise Mistake(f"{exc.format_message()} (see `{ctx.command_path} --help`)") from None


class _OneLineGroup(click.Group):
    command_class = _OneLineCommand

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise Mistake(f"{exc.format_message()} (see `{ctx.command_path} --help`)") from None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            raise Mistake(f"{exc.format_message()} (see `{ctx.command_path} --help`)") from None


@dataclass(frozen=True)
class _Given:
    """What the group level was given; the sub-command resolves the :class:`Target`."""

    app: Any
    url: str | None
    prefix: str | None
    master_name: str | None


_URL_HELP = (
    "Redis URL of the locks (default: the app's redislock_url or broker); "
    "before or after the sub-command."
)
_PREFIX_HELP = "Key prefix (default: the app's redislock_prefix)."
_MASTER_HELP = (
    "Sentinel master name for a sentinel:// --url (default: master_name of the app's "
    "redislock_transport_options or broker_transport_options)."
)


def _connection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds --url/--prefix/--master-name to a sub-command and passes it the Target."""

    @click.option("--url", help=_URL_HELP)
    @click.option("--prefix", help=_PREFIX_HELP)
    @click.option("--master-name", help=_MASTER_HELP)
    @click.pass_context
    @functools.wraps(command)
    def wrapper(
        ctx: click.Context,
        /,
        *args: Any,
        url: str | None,
        prefix: str | None,
        master_name: str | None,
        **kwargs: Any,
    ) -> Any:
        given = ctx.obj if isinstance(ctx.obj, _Given) else _Given(None, None, None, None)
        target = _target(
            given.app,
            _one("--url", given.url, url),
            _one("--prefix", given.prefix, prefix),
            _one("--master-name", given.master_name, master_name),
        )
        return command(target, *args, **kwargs)

    return wrapper


@click.group(name="redislock", cls=_OneLineGroup)
@click.option("--url", help=_URL_HELP)
@click.option("--prefix", help=_PREFIX_HELP)
@click.option("--master-name", help=_MASTER_HELP)
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
    ctx.obj = _Given(getattr(ctx.obj, "app", None), url, prefix, master_name)


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
@_connection_options
def status(target: Target, as_json: bool, match: str, max_waiters: int) -> None:
    """List held locks and semaphores: holders, fencing tokens, ages, waiters."""
    with _redis_errors(target):
        snap = snapshot(target.client, target.prefix, match)
        parked = [r for r in parking.status(target.client, target.prefix)
                  if fnmatch.fnmatchcase(r.name, match)]  # fmt: skip
        stated = _statements(target, snap)
    snap = replace(snap, lease_sets=tuple(target.with_limits(snap.lease_sets)))
    if as_json:
        body = {"url": target.url, **snap.as_dict(), "parked": [vars(r) for r in parked],
                "last_statement_ago": stated}  # fmt: skip
        click.echo(json.dumps(body, indent=2, sort_keys=True, default=str))
    else:
        click.echo(_format_snapshot(snap, target.url, max_waiters, stated))
        for line in _format_parked(parked):
            click.echo(line)


@redislock.command(name="parked")
@click.argument("names", nargs=-1)
@click.option("--list", "count", default=0, type=click.IntRange(min=0), help="List N per name.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_connection_options
def parked(target: Target, names: tuple[str, ...], count: int, as_json: bool) -> None:
    """Parked tasks (policy park) per name: count, oldest age, in flight, overdue."""
    with _redis_errors(target):
        rows = parking.status(target.client, target.prefix, list(names) or None, count=count)
    if as_json:
        click.echo(json.dumps([vars(r) for r in rows], indent=2, sort_keys=True, default=str))
    else:
        click.echo("\n".join(_format_parked(rows, entries=True)) or "no parked tasks")


@redislock.command(name="discard-parked")
@click.argument("name")
@click.option("--task-id", "task_ids", multiple=True, help="Only this task; repeatable.")
@click.option("-f", "--force", is_flag=True, help="Do not ask for confirmation.")
@_connection_options
def discard_parked(target: Target, name: str, task_ids: tuple[str, ...], force: bool) -> None:
    """Discard the parked tasks of NAME (they never run; marked REVOKED)."""
    what = ", ".join(task_ids) if task_ids else "all parked tasks"
    if not force:
        click.confirm(f"discard {what} of {name!r}?", abort=True)
    with _redis_errors(target):
        removed = parking.discard(target.client, target.prefix, name, task_ids, app=target.app)
    click.echo(f"discarded {removed} task(s) of {name!r}")


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
@_connection_options
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
        with _redis_errors(target):
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
            click.echo(f"  token {h.token}  {_who(h.owner, h.meta)}  owner {h.owner}")
        click.echo(
            "The task(s) holding them are NOT stopped; they will see the lease lost at their "
            "next heartbeat."
        )
        click.confirm("Release?", abort=True)
    with _redis_errors(target):
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
        click.echo(f"released {name!r} token {h.token} ({_who(h.owner, h.meta)}, owner {h.owner})")
    for h in gone:
        click.echo(f"already gone: {name!r} token {h.token} (owner {h.owner})")


# -- helpers ------------------------------------------------------------------


def _one(option: str, before: str | None, after: str | None) -> str | None:
    """The value of an option given before and/or after the sub-command."""
    if before is not None and after is not None and before != after:
        raise Mistake(f"{option} given twice with different values: {before!r} and {after!r}")
    return after if after is not None else before


def _target(app: Any, url: str | None, prefix: str | None, master_name: str | None) -> Target:
    no_app = app is None or getattr(app, "main", None) == "default"  # Celery's fallback app
    if url is None and no_app:
        raise Mistake(
            "no Celery app given: run `celery -A yourproject redislock ...` "
            "(or give the Redis with --url redis://host:6379/0, before or after the sub-command)"
        )
    try:
        if app is not None:
            settings = settings_from_app(app, url)
        else:
            assert url is not None
            settings = Settings(url=url, url_setting="--url")
    except (TypeError, ValueError) as exc:
        hint = (
            ".  Pass your app with -A (e.g. `celery -A proj redislock status`) "
            "or a Redis with --url redis://host:6379/0"
            if url is None
            else ""
        )
        raise Mistake(one_line(f"{exc}{hint}", 1000)) from None
    options = dict(settings.transport_options)
    if master_name is not None:
        options["master_name"] = master_name
    shown = redact(settings.url)
    try:
        prefix = validate_prefix(prefix or settings.prefix)
        client = client_from_url(settings.url, options)
    except (TypeError, ValueError) as exc:
        raise Mistake(one_line(str(exc), 1000)) from None
    except (RedisError, RedisClusterException) as exc:  # a cluster client connects when built
        raise _failure(exc, f"{shown} ({settings.url_origin})", None) from None
    return Target(client, shown, prefix, app, settings.url_origin)


def _failure(exc: BaseException, where: str, client: Any) -> click.ClickException:
    found = diagnose(exc, where, client)
    message = found.message
    if isinstance(exc, ResponseError) and "syntax" in str(exc).lower():
        message += " (SCAN ... TYPE needs Redis >= 6.0)"
    return Unreachable(message) if found.unreachable else Mistake(message)


@contextmanager
def _redis_errors(target: Target) -> Iterator[None]:
    try:
        yield
    except (RedisError, RedisClusterException) as exc:
        raise _failure(exc, f"{target.url} ({target.origin})", target.client) from None


def _who(owner: str, meta: dict[str, Any]) -> str:
    task = task_id_of(owner, meta)
    where = f"{meta.get('host', '?')}:{meta.get('pid', '?')}"
    if task:
        return f"task {task} [{meta.get('task', '?')}] on {where}"
    return f"pid {where}"


def _seconds(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:.1f}h"
    if value >= 60:
        return f"{value / 60:.1f}m"
    return f"{value:.1f}s"


def _format_parked(rows: Iterable[Any], entries: bool = False) -> list[str]:
    lines = []
    for r in rows:
        lines.append(
            f"{r.name}  [parked]  {r.parked} parked (oldest {_age(r.oldest_age)}), "
            f"{r.in_flight} promoted not yet arrived, {r.overdue} overdue"
        )
        for e in r.entries if entries else ():
            lines.append(f"  {e['task_id']}  {e['task']}{e['argsrepr'] or ''}  {_age(e['age'])}")
        for e in r.promoted if entries else ():
            lines.append(
                f"  {e['task_id']}  {e['task']}{e['argsrepr'] or ''}  {_age(e['age'])}  "
                f"promoted, deadline in {_age(e['deadline_in'])}"
            )
    return lines


def _alive(stated: dict[str, float], owner: str) -> str:
    """The ALIVE column: when the holder's worker process last stated its
    holdings (every ttl/3 while it holds any): an age well above that means the
    process is gone or stuck.  "-" for reservations and holders outside a
    worker, which state nothing."""
    ago = stated.get(owner)
    return "-" if ago is None else f"{_seconds(ago)} ago"


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def _statements(target: Target, snap: Snapshot) -> dict[str, float]:
    """Per holder owner: seconds since its worker process last stated its
    holdings (core/liveness.py); holders without a statement are left out."""
    holders = [(ls, h) for ls in snap.lease_sets for h in ls.holders
               if isinstance(h.meta.get("proc"), str)]  # fmt: skip
    stated = liveness.last_statements(
        target.client, target.prefix, {h.meta["proc"] for _, h in holders}
    )
    return {
        h.owner: round(max(ls.now - stated[h.meta["proc"]], 0.0), 1)
        for ls, h in holders
        if h.meta["proc"] in stated
    }


def _format_snapshot(
    snap: Snapshot, url: str, max_waiters: int, stated: dict[str, float]
) -> str:
    reserved = sum(1 for ls in snap.lease_sets for h in ls.holders if h.meta.get("reserved"))
    held = sum(len(ls.holders) for ls in snap.lease_sets) - reserved
    waiting = sum(len(ls.waiters) for ls in snap.lease_sets)
    if not snap.lease_sets:
        return f"nothing held or waiting under prefix {snap.prefix!r} on {url}"
    also = f", {reserved} reserved for promoted tasks" if reserved else ""
    lines = [
        f"{len(snap.lease_sets)} lock(s)/semaphore(s) under prefix {snap.prefix!r} on {url}: "
        f"{held} held{also}, {waiting} waiting",
    ]
    for ls in snap.lease_sets:
        lines += ["", *_format_state(ls, max_waiters, stated)]
    return "\n".join(lines)


def _format_state(
    ls: LeaseSetState, max_waiters: int, stated: dict[str, float]
) -> list[str]:
    limit = f"/{ls.limit}" if ls.limit is not None else ""
    # A park reservation holds a slot for a promoted task whose message is on its
    # way: it is not a running holder, and is shown apart.
    reserved = [h for h in ls.holders if h.meta.get("reserved")]
    running = len(ls.holders) - len(reserved)
    also = f" (+{len(reserved)} reserved for promoted tasks)" if reserved else ""
    lines = [f"{ls.name}  [{ls.kind}]  held {running}{also}{limit}  waiting {len(ls.waiters)}"]
    rows = [("TOKEN", "TASK ID", "TASK", "HOST:PID", "ALIVE", "AGE", "TTL LEFT", "OWNER")]
    for h in ls.holders:
        is_reservation = bool(h.meta.get("reserved"))
        rows.append(
            (
                str(h.token),
                str(h.meta.get("task_id") or "-") if is_reservation
                else task_id_of(h.owner, h.meta) or "-",
                "(promoted, not yet started)" if is_reservation
                else str(h.meta.get("task") or "-"),
                "-" if is_reservation else f"{h.meta.get('host', '?')}:{h.meta.get('pid', '?')}",
                _alive(stated, h.owner),
                _seconds(max(ls.now - h.acquired_at, 0.0)),
                f"{_seconds(max(h.expires_in, 0.0))}/{_seconds(h.ttl)}",
                h.owner,
            )
        )  # fmt: skip
    if ls.holders:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                  for r in rows]  # fmt: skip
    for i, w in enumerate(ls.waiters[:max_waiters]):
        lines.append(f"  waiting #{i + 1}: {_who(w.owner, w.meta)}  owner {w.owner}")
    if len(ls.waiters) > max_waiters:
        lines.append(f"  ... and {len(ls.waiters) - max_waiters} more waiting")
    return lines


if __name__ == "__main__":  # pragma: no cover - `python -m celery_redislock.cli --url ...`
    sys.exit(redislock())
