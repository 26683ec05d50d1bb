"""How ``celery redislock`` finds its Redis, and how it reports mistakes.

Guaranteed:

* every sub-command works on one :class:`Target`: the Redis and key prefix
  of the app (``redislock_url``, else its Redis broker; ``redislock_prefix``),
  unless ``--url``, ``--prefix`` or ``--master-name`` override them, given
  before or after the sub-command (the same option given twice with different
  values is a mistake);
* a user mistake (bad option or argument, bad URL, no app and no ``--url``,
  Redis refusing a command) is :class:`Mistake`: one line on stderr, exit
  status 2, the password masked; a Redis, Cluster or Sentinel that cannot be
  reached is :class:`Unreachable`: one line, exit status 1.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any

import click
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from ..core.connection import client_from_url
from ..core.inspection import LeaseSetState
from ..core.keys import validate_prefix
from ..core.validation import MAX_TTL
from ..diagnose import diagnose, one_line
from ..settings import Settings, named, settings_from_app, where

__all__ = [
    "MASTER_HELP",
    "PREFIX_HELP",
    "SECONDS",
    "URL_HELP",
    "Given",
    "Mistake",
    "OneLineCommand",
    "OneLineGroup",
    "Target",
    "Unreachable",
    "connection_options",
    "redis_errors",
]


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


class _Seconds(click.FloatRange):
    """A positive number of seconds up to ``MAX_TTL`` (``inf`` and ``nan`` are mistakes)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


#: the type of every option or argument that is a number of seconds
SECONDS = _Seconds(min=0, max=MAX_TTL, min_open=True)


class OneLineCommand(click.Command):
    """Reports a bad option or argument in one line (no usage block)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise Mistake(f"{exc.format_message()} (see `{ctx.command_path} --help`)") from None


class OneLineGroup(click.Group):
    """A group whose bad options, arguments and sub-command names, and those
    of its sub-commands, are reported in one line (:class:`Mistake`)."""

    command_class = OneLineCommand

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
class Given:
    """What the group level was given; the sub-command resolves the :class:`Target`."""

    app: Any
    url: str | None
    prefix: str | None
    master_name: str | None


URL_HELP = (
    "Redis URL of the locks (default: the app's redislock_url or broker); "
    "before or after the sub-command."
)
PREFIX_HELP = "Key prefix (default: the app's redislock_prefix)."
MASTER_HELP = (
    "Sentinel master name for a sentinel:// --url (default: master_name of the app's "
    "redislock_transport_options or broker_transport_options)."
)


def connection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds --url/--prefix/--master-name to a sub-command and passes it the Target."""

    @click.option("--url", help=URL_HELP)
    @click.option("--prefix", help=PREFIX_HELP)
    @click.option("--master-name", help=MASTER_HELP)
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
        given = ctx.obj if isinstance(ctx.obj, Given) else Given(None, None, None, None)
        target = _target(
            given.app,
            _one("--url", given.url, url),
            _one("--prefix", given.prefix, prefix),
            _one("--master-name", given.master_name, master_name),
        )
        return command(target, *args, **kwargs)

    return wrapper


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
    try:
        prefix = validate_prefix(settings.prefix if prefix is None else prefix)
        client = client_from_url(settings.url, options)
    except (TypeError, ValueError) as exc:
        raise Mistake(one_line(str(exc), 1000)) from None
    except (RedisError, RedisClusterException) as exc:  # a cluster client connects when built
        raise _failure(exc, where(settings), None) from None
    shown, origin = named(settings, client)  # a factory's client: where it connects
    return Target(client, shown, prefix, app, origin)


def _failure(exc: BaseException, where: str, client: Any) -> click.ClickException:
    found = diagnose(exc, where, client)
    message = found.message
    if isinstance(exc, ResponseError) and "syntax" in str(exc).lower():
        message += " (SCAN ... TYPE needs Redis >= 6.0)"
    return Unreachable(message) if found.unreachable else Mistake(message)


@contextmanager
def redis_errors(target: Target) -> Iterator[None]:
    """Turns a Redis error inside the block into :class:`Unreachable` or :class:`Mistake`."""
    try:
        yield
    except (RedisError, RedisClusterException) as exc:
        raise _failure(exc, f"{target.url} ({target.origin})", target.client) from None
