"""Fixtures for the dashboard's tests: a queue on the suite's server, and a
client that talks to the dashboard as a browser on its page would."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from werkzeug.test import Client, TestResponse

import pgqueue
from pgqueue.core.events import OperatorAction
from pgqueue.web import Dashboard, Request

ORIGIN = "http://localhost"


class Operator:
    """A WSGI test client that keeps the dashboard's cookie and posts the
    CSRF token of the last page it read, from the dashboard's own origin."""

    def __init__(self, app: Any, root: str = "") -> None:
        self.client = Client(app)
        self.root = root
        self.token = ""

    def get(self, path: str, **kwargs: Any) -> TestResponse:
        response = self.client.get(self.root + path, **kwargs)
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', response.get_data(as_text=True))
        if found:
            self.token = found.group(1)
        return response

    def text(self, path: str) -> str:
        response = self.get(path)
        assert response.status_code == 200, response.get_data(as_text=True)
        return response.get_data(as_text=True)

    def post(
        self, path: str, data: dict[str, Any], *, origin: str | None = ORIGIN, token: bool = True
    ) -> TestResponse:
        headers = {"Origin": origin} if origin else {}
        form = {"csrf": self.token, **data} if token else data
        return self.client.post(self.root + path, data=form, headers=headers)


@pytest.fixture
def queue(dsn: str, table: str) -> Iterator[pgqueue.Queue]:
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        yield q


@pytest.fixture
def actions() -> list[OperatorAction]:
    return []


@pytest.fixture
def dashboard(queue: pgqueue.Queue, actions: list[OperatorAction]) -> Iterator[Dashboard]:
    """A dashboard whose authorize hook reads the role from an ``X-Role`` header
    (admin when absent)."""

    def authorize(request: Request) -> str | None:
        role = request.headers.get("x-role", "admin")
        request.user = "tester"
        return None if role == "none" else role

    with Dashboard(queue, authorize=authorize, on_action=actions.append) as d:
        yield d


@pytest.fixture
def operator(dashboard: Dashboard) -> Operator:
    return Operator(dashboard.wsgi)


def dead_job(q: pgqueue.Queue, kind: str = "boom", payload: Any = None, **kw: Any) -> int:
    """A job that failed its only attempt."""
    job_id = q.enqueue(kind, payload, max_attempts=1, **kw)
    [job] = q.claim(1, worker="w-dead", kinds=[kind])
    assert job.id == job_id
    q.fail(job, f"{kind} failed")
    return job_id
