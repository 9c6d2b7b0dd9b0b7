"""``pgqueue dashboard``: the login it takes (token, basic auth), and the command itself."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import httpx
import pytest

import pgqueue
from pgqueue.web import Dashboard
from pgqueue.web.http import Request
from pgqueue.web.standalone import TOKEN_COOKIE, login, token_authorize


def request(headers: dict[str, str] | None = None, query: str = "") -> Request:
    args = dict(p.split("=", 1) for p in query.split("&") if p)
    return Request("GET", "/", "", {k: [v] for k, v in args.items()}, headers or {})


def test_token_admits_by_bearer_header_or_cookie_only() -> None:
    authorize = token_authorize(token="s3cret", basic=None)
    assert authorize(request({"authorization": "Bearer s3cret"})) == "admin"
    assert authorize(request({"cookie": f"{TOKEN_COOKIE}=s3cret"})) == "admin"
    assert authorize(request({"authorization": "Bearer nope"})) is None
    assert authorize(request({})) is None


def test_basic_auth_admits_the_user_and_names_them() -> None:
    authorize = token_authorize(token=None, basic=("ops", "pw"), read_only=True)
    good = request({"authorization": "Basic " + base64.b64encode(b"ops:pw").decode()})
    assert authorize(good) == "read" and good.user == "ops"
    bad = request({"authorization": "Basic " + base64.b64encode(b"ops:no").decode()})
    assert authorize(bad) is None
    assert authorize(request({"authorization": "Basic !!!"})) is None


def test_token_in_the_url_becomes_a_cookie_and_leaves_the_url(dsn: str, table: str) -> None:
    with Dashboard(dsn, table=table, authorize=lambda r: None) as dashboard:
        handle = login(dashboard, "s3cret")
        response = handle(request(query="token=s3cret&x=1"))
        assert response.status == 303
        assert dict(response.headers)["location"] == "/?x=1"
        assert f"{TOKEN_COOKIE}=s3cret; Path=/; HttpOnly" in dict(response.headers)["set-cookie"]
        assert handle(request(query="token=wrong")).status == 403


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(dsn: str, table: str) -> Iterator[tuple[str, str]]:
    """``pgqueue dashboard`` on a port of its own: its URL, and the login URL it printed."""
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        q.enqueue("hello", {"from": "the command"})
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgqueue.cli", "dashboard", "--dsn", dsn, "--table", table,
         "--port", str(port)],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PGQUEUE_DASHBOARD_TOKEN": ""},
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        login_url = ""
        for line in proc.stderr:
            if "pgqueue dashboard of" in line:
                login_url = line.rsplit(" ", 1)[1].strip()
            if "Uvicorn running on" in line:
                break
        else:
            pytest.fail(f"pgqueue dashboard exited with {proc.wait()}")
        yield f"http://127.0.0.1:{port}/", login_url
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_command_serves_the_overview_after_a_token_login(served: tuple[str, str]) -> None:
    url, login_url = served
    assert login_url.startswith(url + "?token=")
    with httpx.Client() as client:
        assert client.get(url).status_code == 403
        page = client.get(login_url, follow_redirects=True)
        assert page.status_code == 200 and str(page.url) == url
        assert "hello" in page.text


def processes_naming(text: str) -> list[int]:
    """Pids of the processes whose command line holds ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(entry))
            except OSError:  # ended meanwhile
                continue
    return found


def test_sigterm_stops_the_embedded_server_it_started() -> None:
    # Without a DSN the command starts an embedded server, in a directory
    # under TMPDIR: after a SIGTERM (a service manager's stop) neither the
    # server nor its directory may be left behind.
    top = tempfile.mkdtemp(prefix="pgqueue-test-dashboard-")
    os.chmod(top, 0o755)  # as root, the server runs as another user
    env = {**os.environ, "TMPDIR": top, "PGQUEUE_DASHBOARD_TOKEN": ""}
    env.pop("PGQUEUE_DSN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgqueue.cli", "dashboard", "--port", str(free_port())],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if "Uvicorn running on" in line:
                break
        else:
            pytest.fail(f"pgqueue dashboard exited with {proc.wait()}")
        assert [d for d in os.listdir(top) if d.startswith("pgqueue-")]  # the server's directory
        assert processes_naming(top)  # the server
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        assert [d for d in os.listdir(top) if d.startswith("pgqueue-")] == []
        assert processes_naming(top) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in processes_naming(top):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(top, ignore_errors=True)
