"""``celery redislock``: see and release the locks and semaphores in Redis.

Registered as a Celery sub-command through the ``celery.commands`` entry
point, so it reads the same app configuration as the workers::

    celery -A proj redislock status                 # held locks/semaphores, waiters
    celery -A proj redislock status --json          # the same, for machines
    celery -A proj redislock status --match 'account:*'
    celery -A proj redislock release report:42      # asks for confirmation
    celery -A proj redislock release report:42 --owner <owner> --force

The Redis and key prefix are the app's ``redislock_url`` (default: its Redis
broker) and ``redislock_prefix``; ``--url`` and ``--prefix`` override them.
Listing uses SCAN (never KEYS), so it is safe on a large production keyspace.

``release`` frees the slot in Redis (handing it to the next waiter); it does
not stop the task that held it.  That task's heartbeat notices the loss at
its next beat.  Revoke the task too (``celery -A proj control revoke <id>``)
if it must not go on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import click
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .config import settings_from_app
from .connection import client_from_url
from .inspection import (
    LeaseSetState,
    Snapshot,
    force_release,
    inspect_names,
    snapshot,
    task_id_of,
)
from .keys import LeaseKeys, validate_prefix

__all__ = ["redislock"]


@dataclass(frozen=True)
class Target:
    """Where the command looks: one Redis and one key prefix (and the app)."""

    client: Any
    url: str
    prefix: str
    app: Any = None

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
            limit_of = getattr(tasks.get(name), "_redislock_limit", None)
            if callable(limit_of):
                with suppress(Exception):
                    return int(limit_of())
        return None


@click.group(name="redislock")
@click.option("--url", help="Redis URL of the locks (default: the app's redislock_url or broker).")
@click.option("--prefix", help="Key prefix (default: the app's redislock_prefix).")
@click.pass_context
def redislock(ctx: click.Context, /, url: str | None, prefix: str | None, **_: Any) -> None:
    """Inspect and release celery-redislock locks and semaphores."""
    app = getattr(ctx.obj, "app", None)
    ctx.obj = _target(app, url, prefix)


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
@click.pass_obj
def status(target: Target, as_json: bool, match: str, max_waiters: int) -> None:
    """List held locks and semaphores: holders, fencing tokens, ages, waiters."""
    with _redis_errors(target):
        snap = snapshot(target.client, target.prefix, match)
    snap = replace(snap, lease_sets=tuple(target.with_limits(snap.lease_sets)))
    if as_json:
        click.echo(json.dumps({"url": target.url, **snap.as_dict()}, indent=2, sort_keys=True))
    else:
        click.echo(_format_snapshot(snap, target.url, max_waiters))


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
@click.pass_obj
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
        raise click.BadParameter(str(exc), param_hint="NAME") from exc
    if not state.holders:
        queued = f" ({len(state.waiters)} waiting)" if state.waiters else ""
        raise click.ClickException(
            f"unknown key: nothing holds {name!r} under prefix {prefix!r} on "
            f"{target.url}{queued}; `celery redislock status` lists what is held"
        )
    chosen = [h for h in state.holders if not owners or h.owner in owners]
    missing = sorted(set(owners) - {h.owner for h in state.holders})
    if missing:
        raise click.ClickException(
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
    if as_json:
        report = {
            "name": name,
            "prefix": prefix,
            "released": [{"owner": h.owner, "token": h.token, **h.meta} for h in released],
            "already_gone": [h.owner for h in chosen if h not in released],
        }
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    for h in released:
        click.echo(f"released {name!r} token {h.token} ({_who(h.owner, h.meta)}, owner {h.owner})")
    for h in chosen:
        if h not in released:
            click.echo(f"already gone: {name!r} token {h.token} (owner {h.owner})")


# -- helpers ------------------------------------------------------------------


def _target(app: Any, url: str | None, prefix: str | None) -> Target:
    if url is None:
        if app is None or getattr(app, "main", None) == "default":
            # Celery's fallback app: no -A was given.
            raise click.UsageError(
                "no Celery app given: run `celery -A yourproject redislock ...` "
                "(or give the Redis with --url redis://host:6379/0)"
            )
        try:
            settings = settings_from_app(app)
        except (TypeError, ValueError) as exc:
            raise click.UsageError(
                f"{exc}.  Pass your app with -A (e.g. `celery -A proj redislock status`) "
                "or a Redis with --url redis://host:6379/0"
            ) from exc
        url = settings.url
        options = dict(settings.transport_options)
        prefix = prefix or settings.prefix
    else:
        options = {}
        if prefix is None and app is not None:
            prefix = app.conf.get("redislock_prefix")
    try:
        prefix = validate_prefix(prefix or "redislock")
        client = client_from_url(url, options)
    except (TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    return Target(client, _redact(url), prefix, app)


@contextmanager
def _redis_errors(target: Target) -> Iterator[None]:
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise click.ClickException(f"cannot reach Redis at {target.url}: {exc}") from exc
    except ResponseError as exc:
        hint = " (SCAN ... TYPE needs Redis >= 6.0)" if "syntax" in str(exc).lower() else ""
        raise click.ClickException(f"Redis at {target.url} refused: {exc}{hint}") from exc


def _redact(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


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


def _format_snapshot(snap: Snapshot, url: str, max_waiters: int) -> str:
    held = sum(len(ls.holders) for ls in snap.lease_sets)
    waiting = sum(len(ls.waiters) for ls in snap.lease_sets)
    if not snap.lease_sets:
        return f"nothing held or waiting under prefix {snap.prefix!r} on {url}"
    lines = [
        f"{len(snap.lease_sets)} lock(s)/semaphore(s) under prefix {snap.prefix!r} on {url}: "
        f"{held} held, {waiting} waiting",
    ]
    for ls in snap.lease_sets:
        lines += ["", *_format_state(ls, max_waiters)]
    return "\n".join(lines)


def _format_state(ls: LeaseSetState, max_waiters: int) -> list[str]:
    limit = f"/{ls.limit}" if ls.limit is not None else ""
    lines = [f"{ls.name}  [{ls.kind}]  held {len(ls.holders)}{limit}  waiting {len(ls.waiters)}"]
    rows = [("TOKEN", "TASK ID", "TASK", "HOST:PID", "AGE", "TTL LEFT", "OWNER")]
    for h in ls.holders:
        rows.append(
            (
                str(h.token),
                task_id_of(h.owner, h.meta) or "-",
                str(h.meta.get("task") or "-"),
                f"{h.meta.get('host', '?')}:{h.meta.get('pid', '?')}",
                _seconds(max(ls.now - h.acquired_at, 0.0)),
                f"{_seconds(max(h.expires_in, 0.0))}/{_seconds(h.ttl)}",
                h.owner,
            )
        )
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
