"""``pgqueue dashboard``: the login it takes (token, basic auth), and the command itself."""

from __future__ import annotations

import base64
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

import pgqueue
from pgqueue.cli.dashboard import read_secret
from pgqueue.cli.errors import UsageError
from pgqueue.web import Dashboard
from pgqueue.web.http import Request, Response
from pgqueue.web.standalone import FailedLogins, Login, token_authorize

TOKEN = "a-token-of-24-characters"
PASSWORD = "a-password-of-24-chars!!"


def request(
    headers: dict[str, str] | None = None, query: str = "", *, path: str = "/", root: str = ""
) -> Request:
    args = dict(p.split("=", 1) for p in query.split("&") if p)
    return Request("GET", path, root, {k: [v] for k, v in args.items()}, headers or {})


@pytest.fixture
def failed() -> FailedLogins:
    return FailedLogins(delay=0.05)


def test_token_admits_by_bearer_header_only(failed: FailedLogins) -> None:
    authorize = token_authorize(token=TOKEN, basic=None, failed=failed)
    assert authorize(request({"authorization": f"Bearer {TOKEN}"})) == "admin"
    assert authorize(request({"cookie": f"pgqueue_token={TOKEN}"})) is None
    assert authorize(request({"authorization": "Bearer nope"})) is None
    assert authorize(request({"authorization": "Bearer n\u00f6n-\u00e4scii"})) is None
    assert authorize(request({})) is None


def test_basic_auth_admits_the_user_and_names_them(failed: FailedLogins) -> None:
    authorize = token_authorize(token=None, basic=("ops", PASSWORD), read_only=True, failed=failed)
    good = request(
        {"authorization": "Basic " + base64.b64encode(f"ops:{PASSWORD}".encode()).decode()}
    )
    assert authorize(good) == "read" and good.user == "ops"
    bad = request({"authorization": "Basic " + base64.b64encode(b"ops:no").decode()})
    assert authorize(bad) is None
    assert authorize(request({"authorization": "Basic !!!"})) is None


@pytest.mark.parametrize("short", ["", "s3cret", "x" * 15])
def test_tokens_and_passwords_under_16_characters_are_refused(short: str) -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        token_authorize(token=short, basic=None)
    with pytest.raises(ValueError, match="at least 16 characters"):
        Login(token=None, basic=("ops", short), port=8787)


def test_failed_logins_are_slowed_and_logged_at_most_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failed = FailedLogins(delay=0.2, every=3600)
    authorize = token_authorize(token=TOKEN, basic=None, failed=failed)
    caplog.set_level(logging.WARNING, logger="pgqueue.web")
    started = time.monotonic()
    for _ in range(3):
        assert authorize(request({"authorization": "Bearer wrong"})) is None
    assert time.monotonic() - started >= 3 * 0.2  # each failure waited its delay
    lines = [r.getMessage() for r in caplog.records if "failed login" in r.getMessage()]
    assert len(lines) == 1 and "wrong bearer token" in lines[0]


def login_session(login: Login, handle: Callable[[Request], Response]) -> tuple[str, str]:
    """Log in with the printed link: the cookie's name=value, and its attributes."""
    code = login.url("http://127.0.0.1:8787").split("code=", 1)[1]
    response = handle(request(query=f"code={code}", path="/login"))
    assert response.status == 303
    assert dict(response.headers)["location"] == login.prefix + "/"
    cookie, _, attributes = dict(response.headers)["set-cookie"].partition("; ")
    return cookie, attributes


def test_login_link_works_once_and_gives_a_session_cookie_not_the_token(
    queue: pgqueue.Queue, dsn: str, table: str, failed: FailedLogins
) -> None:
    login = Login(token=TOKEN, basic=None, port=8787, failed=failed)
    with Dashboard(dsn, table=table, authorize=login.authorize) as dashboard:
        handle = login.wrap(dashboard)
        first = login.url("http://127.0.0.1:8787")
        cookie, attributes = login_session(login, handle)
        name, _, sid = cookie.partition("=")
        assert name == "pgqueue_session_8787" and TOKEN not in sid and len(sid) >= 40
        assert f"Path={login.prefix}" in attributes and "HttpOnly" in attributes
        assert "SameSite=Strict" in attributes and "Max-Age=" in attributes
        assert "Secure" not in attributes
        # The same link again: refused; the session works under its path only.
        again = handle(request(query=first.split("?", 1)[1], path="/login"))
        assert again.status == 403
        page = handle(request({"cookie": cookie}, path=login.prefix + "/jobs"))
        assert page.status == 200
        assert handle(request({"cookie": cookie}, path="/jobs")).status == 303  # to /login
        assert (
            handle(
                request({"cookie": "pgqueue_session_8787=made-up"}, path=login.prefix + "/")
            ).status
            == 303
        )


def test_session_cookie_is_secure_behind_https_and_expires(
    queue: pgqueue.Queue, dsn: str, table: str
) -> None:
    login = Login(token=TOKEN, basic=None, port=9000, ttl=0.0, failed=FailedLogins(delay=0))
    with Dashboard(dsn, table=table, authorize=login.authorize) as dashboard:
        handle = login.wrap(dashboard)
        code = login.url("https://dash.example").split("code=", 1)[1]
        via_https = request(query=f"code={code}", path="/login")
        via_https.scheme = "https"
        response = handle(via_https)
        cookie, _, attributes = dict(response.headers)["set-cookie"].partition("; ")
        assert "Secure" in attributes and cookie.startswith("pgqueue_session_9000=")
        # A session of no time at all has expired by its first page.
        expired = handle(request({"cookie": cookie}, path=login.prefix + "/"))
        assert expired.status == 303 and dict(expired.headers)["location"] == "/login"


def test_login_form_takes_the_token(
    queue: pgqueue.Queue, dsn: str, table: str, failed: FailedLogins
) -> None:
    login = Login(token=TOKEN, basic=None, port=8787, failed=failed)
    with Dashboard(dsn, table=table, authorize=login.authorize) as dashboard:
        handle = login.wrap(dashboard)
        form = handle(request(path="/login"))
        assert form.status == 200 and b'name="token"' in form.body
        post = Request("POST", "/login", "", {}, {"origin": "http://127.0.0.1:8787",
                       "host": "127.0.0.1:8787"}, form={"token": [TOKEN]})  # fmt: skip
        response = handle(post)
        assert (
            response.status == 303
            and "pgqueue_session_8787=" in dict(response.headers)["set-cookie"]
        )
        wrong = Request("POST", "/login", "", {}, {}, form={"token": ["wrong"]})
        assert handle(wrong).status == 403


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


def test_command_serves_the_overview_after_a_login_link(served: tuple[str, str]) -> None:
    url, login_url = served
    assert login_url.startswith(url + "login?code=")
    with httpx.Client() as client:
        assert client.get(url).status_code == 303  # to the login form
        page = client.get(login_url, follow_redirects=True)
        assert page.status_code == 200 and str(page.url).startswith(url + "s/")
        assert "hello" in page.text
        assert "token" not in str(page.url) and "code" not in str(page.url)


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


def test_secrets_come_from_a_file_or_the_environment_and_the_command_line_is_warned_against(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    kept = tmp_path / "token"
    kept.write_text(TOKEN + "\n")
    variable = "PGQUEUE_DASHBOARD_TOKEN"
    monkeypatch.setenv(variable, "from-the-environment-0123")
    caplog.set_level(logging.WARNING, logger="pgqueue.web")
    assert read_secret(None, str(kept), variable, "--token") == TOKEN
    assert read_secret(None, None, variable, "--token") == "from-the-environment-0123"
    assert caplog.records == []
    assert read_secret(TOKEN, None, variable, "--token") == TOKEN
    assert "visible to every local user" in caplog.text
    with pytest.raises(UsageError, match="cannot read"):
        read_secret(None, str(tmp_path / "missing"), variable, "--token")


@pytest.mark.parametrize(
    ("path", "query"),
    [("//evil.example/", f"token={TOKEN}"), ("//evil.example/", "code=x"), ("/\u00e9\u4e2d", "")],
)
def test_a_browser_without_a_session_is_sent_to_the_login_form_on_this_site(
    queue: pgqueue.Queue, dsn: str, table: str, failed: FailedLogins, path: str, query: str
) -> None:
    login = Login(token=TOKEN, basic=None, port=8787, failed=failed)
    with Dashboard(dsn, table=table, authorize=login.authorize) as dashboard:
        response = login.wrap(dashboard)(request(query=query, path=path))
        assert response.status == 303 and dict(response.headers)["location"] == "/login"
        assert not any(k == "set-cookie" for k, _ in response.headers)
