"""The dashboard mounted under a prefix in a FastAPI app (ASGI) and a Flask
app (WSGI): the examples, run as a user runs them, and driven further here."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import re
import sys
from collections.abc import Iterator
from types import ModuleType

import httpx
import pytest

import pgqueue

from ..test_examples import EXAMPLES, example_table, run_example  # noqa: F401
from .conftest import dead_job


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tokens(monkeypatch: pytest.MonkeyPatch, dsn: str) -> Iterator[None]:
    # The examples read PGQUEUE_DSN at import, and without it start the local
    # server `pgqueue embedded start` keeps, which would outlive the suite.
    monkeypatch.setenv("PGQUEUE_DSN", dsn)
    monkeypatch.setenv("DASHBOARD_TOKEN", "admin-token")
    monkeypatch.setenv("DASHBOARD_READ_TOKEN", "read-token")
    monkeypatch.setenv("DASHBOARD_USER", "ops")
    monkeypatch.setenv("DASHBOARD_PASSWORD", "secret")
    yield


def test_fastapi_example_retries_a_dead_job_through_its_mount(
    dsn: str,
    example_table: str,  # noqa: F811
) -> None:
    out = run_example(dsn, example_table, "dashboard_fastapi.py", "--demo")
    assert "GET /pgqueue/dead: 200, job 1 listed: True" in out
    assert "POST /pgqueue/actions/retry: 303 -> /pgqueue/dead?done=retried&n=1" in out
    assert "GET /pgqueue/ with a wrong token: 403" in out
    assert "job 1 is now pending" in out


def test_flask_example_pauses_a_queue_through_its_mount(
    dsn: str,
    example_table: str,  # noqa: F811
) -> None:
    out = run_example(dsn, example_table, "dashboard_flask.py", "--demo")
    assert "GET /pgqueue/ without a login: 401" in out
    assert "POST /pgqueue/actions/pause-queue: 303 -> /pgqueue/queues?done=paused" in out
    assert "queue images paused: True" in out


def test_fastapi_mount_links_keep_the_prefix_and_read_only_cannot_act(
    dsn: str, table: str, tokens: None
) -> None:
    module = load("dashboard_fastapi")
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        job_id = dead_job(q)
        app = module.create_app(dsn, table)

        async def drive() -> tuple[str, int, int]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app.test") as c:
                read = {"authorization": "Bearer read-token"}
                page = await c.get("/pgqueue/dead", headers={"authorization": "Bearer admin-token"})
                token = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
                assert token is not None
                refused = await c.post(
                    "/pgqueue/actions/purge",
                    data={"csrf": token.group(1), "id": str(job_id)},
                    headers={**read, "origin": "http://app.test"},
                )
                overview = await c.get("/pgqueue/", headers=read)
                return page.text, refused.status_code, overview.status_code

        html, refused, overview = asyncio.run(drive())
        assert f'href="/pgqueue/jobs/{job_id}"' in html
        assert 'src="/pgqueue/static/htmx.min.js' in html
        assert refused == 403 and overview == 200
        assert q.get(job_id) is not None


def test_flask_mount_asks_for_a_login_and_serves_the_app_beside_it(
    dsn: str, table: str, tokens: None
) -> None:
    module = load("dashboard_flask")
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        app = module.create_app(dsn, table)
        client = app.test_client()
        try:
            challenge = client.get("/pgqueue/jobs")
            assert challenge.status_code == 401
            assert challenge.headers["www-authenticate"].startswith("Basic")
            login = {"authorization": "Basic " + base64.b64encode(b"ops:secret").decode()}
            assert client.get("/pgqueue/jobs", headers=login).status_code == 200
            assert client.get("/").get_json() == {"dashboard": "/pgqueue/"}
        finally:
            app.extensions["pgqueue_dashboard"].close()
