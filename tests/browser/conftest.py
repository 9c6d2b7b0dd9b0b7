"""A real browser for the dashboard's tests: Debian's Chromium, driven headless by Playwright.

Playwright downloads no browser here: it is pointed at ``/usr/bin/chromium``
(``PGQUEUE_TEST_CHROMIUM`` for another path), which ``.ci/run`` installs
from Debian's ``chromium`` package when it is missing. The dashboard is
served on a port of its own by a threaded WSGI server, bound before the
tests start.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from werkzeug.serving import make_server

import pgqueue
from pgqueue.web import Dashboard

CHROMIUM = os.environ.get("PGQUEUE_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # the suite runs as root on CI
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


# Per module: Playwright's sync API runs an event loop of its own on this
# thread while it is started, and the async tests of other modules need it gone.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        pytest.fail(
            f"no Chromium at {CHROMIUM}: install Debian's chromium package "
            "(.ci/run does) or set PGQUEUE_TEST_CHROMIUM"
        )
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def queue(dsn: str, table: str) -> Iterator[pgqueue.Queue]:
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        yield q


class Served:
    """The dashboard on a local port."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.server = make_server("127.0.0.1", 0, dashboard.wsgi, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.thread.join()
        self.dashboard.close()


@pytest.fixture
def served(queue: pgqueue.Queue) -> Iterator[Served]:
    dashboard = Dashboard(queue, authorize=lambda request: "admin", refresh=0.5)
    with Served(dashboard) as s:
        yield s


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    yield tab
    context.close()
    assert errors == [], f"the page logged errors: {errors}"
