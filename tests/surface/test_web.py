"""``celery redislock web``: the live web view, served by a real subprocess on a
real Redis, read over HTTP and in a real headless browser (Debian's chromium).

Holders are separate processes (``tests/holder_proc.py``); parked work is put
in the park directly (``Parking.enqueue``), as a producer would.  The browser
is driven without a driver: ``--dump-dom`` and ``--screenshot`` for one page
load, and the DevTools protocol over ``--remote-debugging-pipe`` (JSON on two
file descriptors) to watch one page update in place.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis

from celery_redislock.admin.web import allowed_host
from celery_redislock.core.capacity import Capacity
from celery_redislock.core.park import ParkConfig, Parking, Verdict
from celery_redislock.testing.servers import free_port
from tests.processes import interruptible, reap
from tests.waiting import wait_for

ONE_SLOT = Capacity.semaphore(1)

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "<script>alert(1)</script>"
HOSTILE_TASK = "<img src=x onerror=alert(2)>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium or chromium-browser on PATH: apt-get install chromium "
    "(.ci/run installs it when run as root)",
)


# -- the server, holders and parked work ------------------------------------------


class View:
    """A running ``celery redislock web`` subprocess."""

    def __init__(self, proc: subprocess.Popen[str], port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}/"
        self.log = log
        assert proc.stdout is not None
        self.banner = [proc.stdout.readline().strip()]  # printed once it listens
        assert self.banner[0].startswith("serving"), (self.banner, self.stderr())
        self.banner.append(proc.stdout.readline().strip())
        found = re.search(r"token: (\S+)", self.banner[1])
        self.token = found.group(1) if found else None

    def stderr(self) -> str:
        return self.log.read_text()

    def get(self, path: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.url.rstrip("/") + path)
        if host is not None:
            request.add_header("Host", host)
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, dict(reply.headers), reply.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def json(self, path: str) -> Any:
        status, _, body = self.get(path)
        assert status == 200, body
        return json.loads(body)

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = self.json("/api/state")
        return data

    def key(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = self.json("/api/key/" + quote(name, safe=""))
        return data

    def post(
        self, action: str, body: dict[str, Any], token: str | None, host: str | None = None
    ) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"{self.url}api/action/{action}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        if host is not None:
            request.add_header("Host", host)
        if token is not None:
            request.add_header("X-Redislock-Token", token)
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


@pytest.fixture
def serve(redis_url: str, prefix: str, tmp_path: Path) -> Iterator[Callable[..., View]]:
    views: list[View] = []

    def _serve(*options: str) -> View:
        port = free_port()
        log = tmp_path / f"web-{port}.log"
        with log.open("w") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "tests.cli_app",
                    "redislock",
                    "--url",
                    redis_url,
                    "--prefix",
                    prefix,
                    "web",
                    "--port",
                    str(port),
                    *options,
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
                preexec_fn=interruptible,
            )
        views.append(View(proc, port, log))
        return views[-1]

    yield _serve
    for view in views:
        if view.proc.poll() is None:
            os.killpg(view.proc.pid, signal.SIGKILL)
        view.proc.wait(timeout=10)
        assert view.proc.stdout is not None
        view.proc.stdout.close()


@pytest.fixture
def hold(redis_url: str, prefix: str) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """``hold(name, slots, **meta)``: a process that holds (or waits for) a slot
    until its stdin closes."""
    procs: list[subprocess.Popen[str]] = []

    def _hold(name: str, slots: int = 1, wait: bool = True, **meta: Any) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.holder_proc",
                redis_url,
                prefix,
                name,
                str(slots),
                "30",
                json.dumps({"limit": slots, **meta}),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        procs.append(proc)
        if wait:
            assert proc.stdout is not None
            assert proc.stdout.readline(), "the holder exited before holding"
        return proc

    yield _hold
    reap(procs)


def park(client: Any, prefix: str, name: str, ids: list[str], task: str = "proj.sync") -> None:
    """Enqueue ``ids`` on ``name`` (limit 1): the first free slot is reserved
    for the first one (promoted, its message on its way), the rest park."""
    parking = Parking(client, prefix, name)
    for task_id in ids:
        envelope = json.dumps({"task": task, "headers": {"argsrepr": f"({task_id!r}, '<b>x</b>')"}})
        verdict = parking.enqueue(
            task_id, ONE_SLOT, envelope, 0, ParkConfig(deadline=30), task
        ).verdict
        assert verdict in (Verdict.RESERVED, Verdict.PARKED)


@pytest.fixture
def busy(
    redis_client: redis.Redis, prefix: str, hold: Callable[..., subprocess.Popen[str]]
) -> dict[str, Any]:
    """A held lock, a full semaphore with a waiter, a parked backlog and a
    hostile key (held, and with parked work whose task name is hostile too)."""
    lock = hold("report:42", task_id="t-report", task="proj.report")
    for i in range(2):
        hold("account:7", slots=2, task_id=f"s-{i}", task="proj.account")
    hold("account:7", slots=2, wait=False, task_id="s-queued", task="proj.account")
    hold(HOSTILE, task_id="t-hostile", task=HOSTILE_TASK)
    park(redis_client, prefix, "sync:acme", ["p-0", "p-1", "p-2", "p-3"])
    park(redis_client, prefix, f"{HOSTILE}:parked", ["h-0", "h-1"], task=HOSTILE_TASK)
    return {"lock": lock}


def by_name(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["name"]: k for k in state["keys"]}


def settled(view: View) -> dict[str, Any]:
    """The state once the third account:7 process waits in its queue."""

    def queued() -> dict[str, Any]:
        state = view.state()
        return state if by_name(state).get("account:7", {}).get("waiting") else {}

    found: dict[str, Any] = wait_for(queued, timeout=30, message="account:7's waiter to queue")
    return found


# -- HTTP ----------------------------------------------------------------------------


def test_the_json_shows_holders_the_parked_backlog_and_hostile_names_as_data(
    serve: Callable[..., View], busy: dict[str, Any]
) -> None:
    view = serve()
    assert view.token is None and "actions are off" in view.banner[1]
    state = settled(view)
    keys = by_name(state)
    assert set(keys) == {"report:42", "account:7", "sync:acme", HOSTILE, f"{HOSTILE}:parked"}
    lock = keys["report:42"]
    assert (lock["held"], lock["limit"], lock["level"]) == (1, 1, "at")  # a LeaseSet of 1
    sem = keys["account:7"]
    assert (sem["held"], sem["limit"], sem["waiting"], sem["level"]) == (2, 2, 1, "at")
    backlog = keys["sync:acme"]
    assert (backlog["parked"], backlog["reserved"], backlog["overdue"]) == (3, 1, 0)
    assert backlog["oldest_parked_age"] >= 0 and backlog["tasks"] == ["proj.sync"]
    (holder,) = [h for h in state["holders"] if h["name"] == "report:42"]
    assert holder["task_id"] == "t-report" and holder["task"] == "proj.report"
    assert holder["host"] and holder["pid"] == busy["lock"].pid and holder["token"] >= 1
    assert 0 <= holder["held_for"] < 120 and 0 < holder["expires_in"] <= holder["ttl"] == 30
    assert not holder["suspect"]
    limiters = {row["task"]: row for row in state["limiters"]}
    assert limiters["proj.account"]["at_cap"] == 1 and limiters["proj.sync"]["parked"] == 3
    assert limiters[HOSTILE_TASK]["keys"] == 2
    assert (state["parked"], state["overdue"], state["actions"]) == (3 + 1, 0, False)

    page = view.key("sync:acme")
    assert [e["task_id"] for e in page["entries"]] == ["p-1", "p-2", "p-3"]
    assert [e["position"] for e in page["entries"]] == [1, 2, 3]
    assert page["entries"][0]["argsrepr"] == "('p-1', '<b>x</b>')"
    assert [e["task_id"] for e in page["promoted"]] == ["p-0"]
    assert page["promoted"][0]["overdue"] is False and page["limit"] == 1
    hostile = view.key(HOSTILE)
    assert hostile["name"] == HOSTILE and hostile["holders"][0]["task"] == HOSTILE_TASK
    assert view.key("account:7")["waiters"][0]["task_id"] == "s-queued"
    assert [e["task_id"] for e in view.json("/api/key/sync%3Aacme?count=1")["entries"]] == ["p-1"]

    # The hostile key is a JSON string (data), served as JSON that no browser sniffs.
    status, headers, body = view.get("/api/state")
    assert json.dumps(HOSTILE) in body.decode()
    assert headers["Content-Type"].startswith("application/json")
    assert headers["X-Content-Type-Options"] == "nosniff"
    # The page carries no data and no inline script; the CSP forbids inline script.
    status, headers, body = view.get("/")
    assert status == 200 and b"alert" not in body and b"account" not in body
    assert re.findall(rb"<script[^>]*>", body) == [b'<script src="/app.js" defer>']
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert view.get("/app.js")[0] == 200 and b"innerHTML" not in view.get("/app.js")[2]
    # Bad requests: one line, 400 / 404; a Host of another name: 403 (DNS rebinding).
    assert view.get("/api/key/a%7Bb")[0] == 400
    assert view.get("/nothing")[0] == 404
    assert view.get("/api/state", host=f"evil.example:{view.port}")[0] == 403
    assert view.get("/api/state", host=f"localhost:{view.port}")[0] == 200


def test_the_host_guard() -> None:
    assert allowed_host("127.0.0.1:8808", "127.0.0.1", 8808)
    assert allowed_host("LOCALHOST:8808", "127.0.0.1", 8808)
    assert allowed_host("[::1]:8808", "127.0.0.1", 8808)
    assert allowed_host("ops.internal:8808", "ops.internal", 8808)
    assert not allowed_host("evil.example:8808", "127.0.0.1", 8808)
    assert not allowed_host("127.0.0.1:9999", "127.0.0.1", 8808)
    assert not allowed_host("127.0.0.1", "127.0.0.1", 8808)
    assert not allowed_host("", "127.0.0.1", 8808) and not allowed_host(None, "127.0.0.1", 8808)


def test_actions_without_allow_actions_or_the_token_are_refused_and_change_nothing(
    serve: Callable[..., View], busy: dict[str, Any], redis_client: redis.Redis, prefix: str
) -> None:
    closed, opened = serve(), serve("--allow-actions")
    assert opened.token and len(opened.token) >= 24
    before = opened.state()
    owner = next(h["owner"] for h in before["holders"] if h["name"] == "report:42")
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("pause", {"name": "sync:acme", "seconds": 60}),
        ("resume", {"name": "sync:acme"}),
        ("discard", {"name": "sync:acme", "task_ids": []}),
        ("release", {"name": "report:42", "owner": owner}),
    ]
    for action, body in attempts:
        for token in (None, "wrong", opened.token):  # the other server's token too
            status, reply = closed.post(action, body, token)
            assert status == 403 and "--allow-actions" in reply["error"]
        for token in (None, "", "wrong", opened.token + "x"):
            status, reply = opened.post(action, body, token)
            assert status == 403 and "X-Redislock-Token" in reply["error"]
        # the right token from a page of another site (DNS rebinding)
        status, reply = opened.post(action, body, opened.token, host="evil.example:80")
        assert status == 403 and "unexpected Host header" in reply["error"]
        wait_for(
            lambda a=action: (
                f"refused action {a!r} from 127.0.0.1: unexpected Host header" in opened.stderr()
            ),
            message=f"the refused {action}'s WARNING line",
        )
    after = opened.state()
    assert [(k["name"], k["held"], k["parked"], k["paused_for"]) for k in after["keys"]] == [
        (k["name"], k["held"], k["parked"], k["paused_for"]) for k in before["keys"]
    ]
    assert [h["owner"] for h in after["holders"]] == [h["owner"] for h in before["holders"]]
    assert redis_client.pttl(f"{prefix}:{{sync:acme}}:pause") == -2
    assert [e["task_id"] for e in opened.key("sync:acme")["entries"]] == ["p-1", "p-2", "p-3"]
    assert "refused action 'pause' from 127.0.0.1" in opened.stderr()
    assert " INFO " not in opened.stderr() and " INFO " not in closed.stderr()


def test_actions_with_the_printed_token_work_and_are_logged(
    serve: Callable[..., View], busy: dict[str, Any], redis_client: redis.Redis, prefix: str
) -> None:
    view = serve("--allow-actions")
    assert view.state()["actions"] is True
    assert f"#token={view.token}" in view.proc.stdout.readline()  # type: ignore[union-attr]

    status, reply = view.post("pause", {"name": "sync:acme", "seconds": 60}, view.token)
    assert status == 200 and reply["paused_for"] == 60
    assert 55_000 < redis_client.pttl(f"{prefix}:{{sync:acme}}:pause") <= 60_000
    assert 55 < by_name(view.state())["sync:acme"]["paused_for"] <= 60
    wait_for(
        lambda: (
            "INFO celery_redislock.web: action pause from 127.0.0.1: paused "
            "'sync:acme' for 60 s" in view.stderr()
        ),
        message="the pause's log line",
    )

    status, reply = view.post("discard", {"name": "sync:acme", "task_ids": ["p-2"]}, view.token)
    assert status == 200 and reply["discarded"] == 1
    assert [e["task_id"] for e in view.key("sync:acme")["entries"]] == ["p-1", "p-3"]

    owner = next(h["owner"] for h in view.state()["holders"] if h["name"] == "report:42")
    assert view.post("release", {"name": "report:42", "owner": owner}, view.token)[0] == 200
    assert "report:42" not in by_name(view.state())
    assert view.post("release", {"name": "report:42", "owner": owner}, view.token)[0] == 409

    assert view.post("resume", {"name": "sync:acme"}, view.token)[0] == 200
    assert redis_client.pttl(f"{prefix}:{{sync:acme}}:pause") == -2
    assert view.post("pause", {"name": "sync:acme", "seconds": -1}, view.token)[0] == 400
    assert view.post("pause", {"name": "a{b", "seconds": 1}, view.token)[0] == 400
    assert view.post("explode", {"name": "sync:acme"}, view.token)[0] == 404
    log = view.stderr()
    for done in (
        "action discard from 127.0.0.1: discarded 1 of 'sync:acme'",
        "action release from 127.0.0.1: released 'report:42'",
        "action resume from 127.0.0.1: resumed 'sync:acme'",
    ):
        assert log.count(done) == 1, log
    assert log.count(" INFO ") == 4


def test_ctrl_c_stops_it_with_status_0_and_a_taken_port_is_one_line_status_2(
    serve: Callable[..., View], redis_url: str, prefix: str
) -> None:
    view = serve()
    view.proc.send_signal(signal.SIGINT)
    assert view.proc.wait(timeout=20) == 0
    assert "Traceback" not in view.stderr()
    other = serve()
    taken = subprocess.run(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.cli_app",
            "redislock",
            "--url",
            redis_url,
            "--prefix",
            prefix,
            "web",
            "--port",
            str(other.port),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert taken.returncode == 2, taken
    assert len(taken.stderr.strip().splitlines()) == 1
    assert f"cannot listen on 127.0.0.1:{other.port}" in taken.stderr


# -- a real browser ------------------------------------------------------------------


class Cells(HTMLParser):
    """Every table row of a page as {header: cell text}, and the script tags."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.scripts: list[dict[str, str | None]] = []
        self._headers: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts.append(dict(attrs))
        elif tag == "table":
            self._headers = []
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._headers:
                self.rows.append(dict(zip(self._headers, self._row, strict=False)))
            else:
                self._headers = self._row
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def key(self, name: str) -> dict[str, str]:
        (row,) = [r for r in self.rows if r.get("Key") == name and "Parked" in r]
        return row


def chromium(*args: str, tmp: Path) -> str:
    out = subprocess.run(
        [
            str(CHROMIUM),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp / 'chromium-profile'}",
            "--virtual-time-budget=5000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def dump(url: str, tmp: Path) -> Cells:
    dom = chromium("--dump-dom", url, tmp=tmp)
    assert 'data-polls="' in dom, dom[-3000:]  # the script ran and rendered
    cells = Cells(dom)
    cells.dom = dom  # type: ignore[attr-defined]
    return cells


class DevTools:
    """One headless chromium driven over ``--remote-debugging-pipe``: commands
    are JSON objects separated by NUL bytes, written to its fd 3, answered on fd 4."""

    def __init__(self, tmp: Path) -> None:
        reader, to_browser = os.pipe()  # it reads our commands on its fd 3
        from_browser, writer = os.pipe()  # and writes its replies on its fd 4

        def fds() -> None:
            theirs = os.dup(reader), os.dup(writer)  # neither is lost if one is 3 or 4
            os.dup2(theirs[0], 3)
            os.dup2(theirs[1], 4)

        self.proc = subprocess.Popen(
            [
                str(CHROMIUM),
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={tmp / 'devtools-profile'}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(3, 4, reader, writer),
            preexec_fn=fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(reader)
        os.close(writer)
        self._out = os.fdopen(to_browser, "wb", buffering=0)
        self._in = os.fdopen(from_browser, "rb", buffering=0)
        self._buffer = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        self._out.write(json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    assert "error" not in reply, reply
                    result: dict[str, Any] = reply["result"]
                    return result
                self.events.append(reply)
            chunk = self._in.read(1 << 16)
            assert chunk, "chromium closed its DevTools pipe"
            self._buffer += chunk

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable")  # dialogs (an alert) would arrive as events
        self.call("Page.navigate", url=url)

    def eval(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)[
            "result"
        ].get("value")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=20)
        self._out.close()
        self._in.close()


@needs_chromium
def test_in_a_browser_the_page_shows_the_state_escapes_and_updates_in_place(
    serve: Callable[..., View],
    busy: dict[str, Any],
    redis_client: redis.Redis,
    prefix: str,
    tmp_path: Path,
) -> None:
    view = serve()
    settled(view)
    page = dump(view.url, tmp_path)
    assert page.key("report:42")["Held / limit"].startswith("1 / 1")
    assert page.key("sync:acme")["Parked"] == "3"
    assert page.key(HOSTILE)["Held / limit"].startswith("1 / 1")  # the name, as text
    dom: str = page.dom  # type: ignore[attr-defined]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom and HOSTILE not in dom
    assert "&lt;img src=x onerror=alert(2)&gt;" in dom and "<img" not in dom
    assert [s.get("src") for s in page.scripts] == ["/app.js"]  # nothing injected

    key_page = dump(view.url + "?key=" + quote(HOSTILE, safe=""), tmp_path)
    kdom: str = key_page.dom  # type: ignore[attr-defined]
    assert "Key <code>&lt;script&gt;alert(1)&lt;/script&gt;</code>" in kdom
    assert [s.get("src") for s in key_page.scripts] == ["/app.js"]
    parked_page = dump(view.url + "?key=sync%3Aacme", tmp_path)
    assert [r["Task id"] for r in parked_page.rows if "Expires in" in r] == ["p-1", "p-2", "p-3"]

    chromium(
        "--screenshot=" + str(ROOT / "docs" / "web-view.png"),
        "--window-size=1280,800",
        view.url,
        tmp=tmp_path,
    )
    assert (ROOT / "docs" / "web-view.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # One page, left open: the state changes in Redis, the page follows without reloading.
    browser = DevTools(tmp_path)
    try:
        browser.open(view.url)
        text = "document.body.innerText"
        wait_for(
            lambda: "report:42" in (browser.eval(text) or ""),
            timeout=30,
            message="the page to show report:42",
        )
        browser.eval("window.sameDocument = 'yes'")
        polls = int(browser.eval("document.body.dataset.polls"))
        busy["lock"].stdin.close()  # the holder releases report:42
        park(redis_client, prefix, "sync:acme", ["p-4", "p-5"])

        def updated() -> bool:
            rows = Cells(browser.eval("document.documentElement.outerHTML"))
            keys = {r["Key"]: r for r in rows.rows if "Key" in r and "Parked" in r}
            return "report:42" not in keys and keys["sync:acme"]["Parked"] == "5"

        wait_for(updated, timeout=30, interval=0.2, message="the page to show the change")
        assert browser.eval("window.sameDocument") == "yes"  # no reload
        assert int(browser.eval("document.body.dataset.polls")) > polls
        assert HOSTILE in browser.eval(text)  # as text
        assert browser.eval("document.scripts.length") == 1
        dialogs = [e for e in browser.events if e.get("method") == "Page.javascriptDialogOpening"]
        assert dialogs == []
    finally:
        browser.close()


def test_a_key_held_for_a_listed_limit_names_it_in_the_json_and_the_page(
    serve: Callable[..., View], redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """A name whose parked work is held for a listed limit (``limits=``):
    the key's JSON says which limit (``waits_for``) and, with a browser, the
    key page's "waits for limit" card shows it; a name not held shows none."""
    park(redis_client, prefix, "sync:acme", ["p-0", "p-1", "p-2"])
    park(redis_client, prefix, "sync:other", ["o-0", "o-1"])
    assert Parking(redis_client, prefix, "sync:acme").hold_for("stripe", 120)
    view = serve()
    assert view.key("sync:acme")["waits_for"] == "stripe"
    assert view.key("sync:other")["waits_for"] is None
    if CHROMIUM is None:
        pytest.skip(needs_chromium.kwargs["reason"])
    page = dump(view.url + "?key=sync%3Aacme", tmp_path)
    dom: str = page.dom  # type: ignore[attr-defined]
    assert '<div class="card"><b>stripe</b>waits for limit</div>' in dom, dom[-3000:]
    other = dump(view.url + "?key=sync%3Aother", tmp_path)
    assert '<div class="card"><b>-</b>waits for limit</div>' in other.dom  # type: ignore[attr-defined]
