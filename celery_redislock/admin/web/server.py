"""The live web view's HTTP server: one static page, its script and style,
two JSON reads and the actions.

The standard library's :class:`http.server.ThreadingHTTPServer`: small,
maintained with Python, nothing to install, and enough for an operator's
page that polls every 2 s (docs/web.md says more).

Routes::

    GET  /                    the page (/?key=NAME: one key's page)
    GET  /app.js, /app.css    its script and style (no inline script: the CSP forbids it)
    GET  /api/state           the overview (web/state.py: overview)
    GET  /api/key/<NAME>      one key (NAME percent-encoded; ?count=N parked tasks, 100)
    POST /api/action/<ACTION> release / discard / pause / resume (web/actions.py)

Safety: every response carries a Content-Security-Policy that allows only
this origin's script and style (no inline script), ``nosniff``, no framing,
no referrer and no caching.  A request whose ``Host`` header is not the
bound host, ``localhost`` or an IP address, at the bound port, is refused
(403): a page of another site that rebinds its DNS name to 127.0.0.1 sends
its own name.  Actions are refused (403, nothing changes) unless the server
was started with actions allowed *and* the request carries the token printed
at start in ``X-Redislock-Token``; each action done is logged at INFO, each
refused one at WARNING (logger ``celery_redislock.web``).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import secrets
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from redis.exceptions import RedisClusterException, RedisError

from ...diagnose import one_line
from ..target import Target
from .actions import ActionError, perform
from .state import key_page, overview

__all__ = ["TOKEN_HEADER", "WebServer", "allowed_host"]

log = logging.getLogger("celery_redislock.web")

TOKEN_HEADER = "X-Redislock-Token"
#: the largest action body read, in bytes
MAX_BODY = 64 * 1024
#: parked tasks a key's page lists by default, and at most
COUNT, MAX_COUNT = 100, 1000

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}


def allowed_host(header: str | None, bound: str, port: int) -> bool:
    """Whether a request's ``Host`` header names this server: the bound host,
    ``localhost`` or an IP address (a DNS-rebinding page sends its own name),
    at ``port``."""
    if not header:
        return False
    header = header.strip().lower()
    if header.startswith("["):  # [an IPv6 address]:port
        host, bracket, rest = header[1:].partition("]")
        if not bracket:
            return False
        given = rest[1:] if rest.startswith(":") else "80" if not rest else ""
    else:
        host, colon, given = header.rpartition(":")
        if not colon:
            host, given = given, "80"
    if given != str(port):
        return False
    if host in ("localhost", bound.lower().strip("[]")):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class WebServer(ThreadingHTTPServer):
    """Serves the view of ``target``; ``token`` None: actions are off."""

    daemon_threads = True

    def __init__(
        self, target: Target, host: str, port: int, allow_actions: bool, match: str = "*"
    ) -> None:
        if ":" in host:  # an IPv6 address
            import socket

            self.address_family = socket.AF_INET6
        super().__init__((host, port), Handler)
        self.target = target
        self.host = host
        self.match = match
        self.token = secrets.token_urlsafe(24) if allow_actions else None
        package = resources.files(__package__ or "celery_redislock.admin.web") / "static"
        self.assets = {
            path: ((package / file).read_bytes(), kind) for path, (file, kind) in STATIC.items()
        }

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class Handler(BaseHTTPRequestHandler):
    server: WebServer
    server_version = "redislock-web"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # every poll: debug only
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        for name, value in HEADERS.items():
            self.send_header(name, value)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        body = json.dumps(data, sort_keys=True, default=str).encode()
        self._send(status, body, "application/json; charset=utf-8")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _host_ok(self) -> bool:
        host = self.headers.get("Host")
        if allowed_host(host, self.server.host, self.server.port):
            return True
        why = "unexpected Host header (open the page at the address it was started on)"
        if self.command == "POST":  # an action, as every refused one: a WARNING line
            action = urlsplit(self.path).path.rpartition("/")[2]
            log.warning(
                "refused action %r from %s: %s %r", action, self.client_address[0], why, host
            )
        self._error(403, why)
        return False

    def do_GET(self) -> None:
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        if url.path in self.server.assets:
            body, kind = self.server.assets[url.path]
            self._send(200, body, kind)
            return
        target = self.server.target
        try:
            if url.path == "/api/state":
                data = overview(target, self.server.match)
                data["actions"] = self.server.token is not None
                self._json(200, data)
            elif url.path.startswith("/api/key/"):
                name = unquote(url.path[len("/api/key/") :], errors="strict")
                count = parse_qs(url.query).get("count", [str(COUNT)])[0]
                if not count.isdigit():
                    raise ValueError(f"count must be a number, got {count!r}")
                data = key_page(target, name, min(int(count), MAX_COUNT))
                data["actions"] = self.server.token is not None
                self._json(200, data)
            else:
                self._error(404, "not found")
        except (TypeError, ValueError) as exc:
            self._error(400, one_line(str(exc), 300))
        except (RedisError, RedisClusterException) as exc:
            self._error(503, one_line(f"Redis at {target.url}: {exc}", 300))

    do_HEAD = do_GET

    def do_POST(self) -> None:
        self.close_connection = True  # an unread body must not be read as the next request
        if not self._host_ok():
            return
        path = urlsplit(self.path).path
        if not path.startswith("/api/action/"):
            self._error(404, "not found")
            return
        action = path[len("/api/action/") :]
        token = self.server.token
        given = self.headers.get(TOKEN_HEADER, "")
        if token is None or not hmac.compare_digest(given.encode(), token.encode()):
            why = (
                "actions are off (start with --allow-actions)"
                if token is None
                else (f"missing or wrong {TOKEN_HEADER} (the token printed at start)")
            )
            log.warning("refused action %r from %s: %s", action, self.client_address[0], why)
            self._error(403, why)
            return
        try:
            body = self._body()
            reply, done = perform(self.server.target, action, body)
        except ActionError as exc:
            log.warning("refused action %r from %s: %s", action, self.client_address[0], exc)
            self._error(exc.status, str(exc))
            return
        except (RedisError, RedisClusterException) as exc:
            self._error(503, one_line(f"Redis at {self.server.target.url}: {exc}", 300))
            return
        log.info("action %s from %s: %s", action, self.client_address[0], done)
        self._json(200, {"ok": True, "did": done, **reply})

    def _body(self) -> dict[str, Any]:
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_BODY:
            raise ActionError(f"a JSON body of at most {MAX_BODY} bytes is needed")
        try:
            body = json.loads(self.rfile.read(int(length)) or b"{}")
        except ValueError:
            raise ActionError("the body is not JSON") from None
        if not isinstance(body, dict):
            raise ActionError("the body must be a JSON object")
        return body
