"""The standalone login in Chromium: a browser logged in to the dashboard on one
port sends no credential to a page served on another port of the same host.

Browsers do not scope cookies by port: ``pgqueue_token=<token>`` once went
to every port of 127.0.0.1. The session cookie that replaced it is scoped to
the dashboard's random session path, so another server on the host, whatever
path it serves, receives neither it nor the token.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, expect
from werkzeug.serving import make_server
from werkzeug.wrappers import Request as WRequest
from werkzeug.wrappers import Response as WResponse

import pgqueue
from pgqueue.web import Dashboard
from pgqueue.web.http import wsgi_app
from pgqueue.web.standalone import FailedLogins, Login

TOKEN = "browser-test-token-0123456789"


class Serving:
    """A WSGI app on a port of 127.0.0.1, in a thread."""

    def __init__(self, app: Any) -> None:
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join()


@pytest.fixture
def other_port() -> Iterator[tuple[Serving, list[str]]]:
    """Another server on the host, that records the Cookie header of every request."""
    seen: list[str] = []

    @WRequest.application
    def spy(request: WRequest) -> WResponse:
        seen.append(request.headers.get("cookie", ""))
        return WResponse("<!doctype html><title>other</title><p>another server</p>",
                         content_type="text/html")  # fmt: skip

    serving = Serving(spy)
    yield serving, seen
    serving.close()


def test_no_credential_cookie_reaches_another_port(
    browser: Browser, queue: pgqueue.Queue, other_port: tuple[Serving, list[str]]
) -> None:
    queue.enqueue("hello", {"n": 1})
    spy, seen = other_port
    # The dashboard's port is known once it is bound: the login is made for it.
    holder: dict[str, Any] = {}
    serving = Serving(lambda environ, start: holder["app"](environ, start))
    login = Login(token=TOKEN, basic=None, port=serving.port, failed=FailedLogins(delay=0))
    dashboard = Dashboard(queue, authorize=login.authorize, refresh=0)
    holder["app"] = wsgi_app(login.wrap(dashboard))
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(login.url(serving.url))
        expect(page.get_by_text("hello").first).to_be_visible()
        assert page.url.startswith(serving.url + login.prefix + "/")
        assert "code=" not in page.url and TOKEN not in page.url
        [session] = [c for c in context.cookies() if c["name"] == login.cookie]
        assert session["path"] == login.prefix and session["httpOnly"]
        assert login.cookie == f"pgqueue_session_{serving.port}"
        # The session works on its own port ...
        page.goto(serving.url + login.prefix + "/jobs")
        expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
        # ... and goes nowhere else on the host, whatever the path.
        for path in ("/", "/jobs", "/s/", login.prefix[:-1], "/login"):
            page.goto(spy.url + path)
            expect(page.get_by_text("another server")).to_be_visible()
        assert len(seen) >= 5  # the pages, and the favicons Chromium asks for
        for header in seen:
            assert session["value"] not in header and TOKEN not in header
            assert "pgqueue" not in header, header
    finally:
        context.close()
        serving.close()
        dashboard.close()
