"""``celery redislock web [--port 8808] [--host 127.0.0.1] [--allow-actions]``.

Serves the live web view (:mod:`celery_redislock.admin.web`) until Ctrl-C (exit
status 0).  It binds 127.0.0.1 unless ``--host`` says otherwise.  With
``--allow-actions`` a random token is printed at start; the page's actions
(release a holder, discard parked tasks, pause / resume a key) need it.
A port that cannot be bound is a :class:`~celery_redislock.admin.target.Mistake`
(one line, exit status 2); a Redis that cannot be reached at start is one
line and exit status 1.

Registered on the ``redislock`` group at the end of ``cli.py`` (an import and
``add_command``); this module does not import ``cli.py`` (no import cycle).
"""

from __future__ import annotations

import logging
import sys

import click

from ..target import Mistake, OneLineCommand, Target, connection_options, redis_errors
from . import WebServer

__all__ = ["web"]


@click.command(name="web", cls=OneLineCommand)
@click.option(
    "--port",
    default=8808,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="TCP port to listen on (0: any free port).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind (not a loopback one: the page is open to others).",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Allow release / discard / pause / resume from the page (needs the token "
    "printed at start).",
)
@click.option("--match", default="*", show_default=True, help="Glob on key names.")
@connection_options
def web(target: Target, port: int, host: str, allow_actions: bool, match: str) -> None:
    """Serve a live web view of the keys, their holders, parks and rates."""
    with redis_errors(target):
        target.client.ping()
    try:
        server = WebServer(target, host, port, allow_actions, match)
    except OSError as exc:
        raise Mistake(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:  # from here on Ctrl-C stops it cleanly, even while it starts
        _announce(target, server, host)
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped")
    finally:
        server.server_close()


def _announce(target: Target, server: WebServer, host: str) -> None:
    """Log to stderr, and print where it serves and whether actions are on."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO,
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    logging.getLogger("celery_redislock.web").setLevel(logging.INFO)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{server.port}/"
    click.echo(
        f"serving the live view of prefix {target.prefix!r} on {target.url} at {url} "
        "(Ctrl-C to stop)"
    )
    if server.token is None:
        click.echo("actions are off (start with --allow-actions to allow them)")
    else:
        click.echo(f"actions allowed; token: {server.token}")
        click.echo(f"open {url}#token={server.token} (the page keeps the token for the tab)")
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            f"warning: bound to {host}: the page is reachable from other machines, over plain HTTP",
            err=True,
        )
    sys.stdout.flush()
