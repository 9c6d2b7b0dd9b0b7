"""examples/django_app runs as its README says, against the suite's server.

Each command is a ``manage.py`` process of its own, on a new database, as
a user would type them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from .test_examples import Server

APP = Path(__file__).resolve().parent.parent / "examples" / "django_app"


@pytest.fixture
def shop_dsn(dsn: str) -> Iterator[str]:
    name = f"shop_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def manage(dsn: str, *args: str) -> str:
    env = {**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": "shop_jobs"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=APP,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


def test_django_example_commits_orders_with_their_tasks_and_runs_them(shop_dsn: str) -> None:
    manage(shop_dsn, "migrate", "--verbosity", "0")
    assert "shop_jobs: schema at version" in manage(shop_dsn, "pgqueue_migrate")

    placed = manage(shop_dsn, "demo")
    assert "card ok: 201 {'order': 1, 'task': '1'}" in placed
    assert "card declined: 402" in placed
    # The declined order rolled back with its task: one order, one job.
    assert "orders: 1, jobs: {'pending': 1}" in placed

    ran = manage(shop_dsn, "pgqueue_worker", "--until-empty")
    assert "receipt for order 1 (teapot) sent to ann@example.com" in ran

    report = manage(shop_dsn, "demo", "--report")
    assert "order 1: task 1 SUCCESSFUL" in report
    assert "returned {'order': 1, 'sent_at': " in report
    with psycopg.connect(shop_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM shop_jobs").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM orders_receipt").fetchone() == (1,)


def test_django_asgi_app_serves_the_dashboard_under_its_prefix_and_the_shop_beside_it(
    shop_dsn: str,
) -> None:
    manage(shop_dsn, "migrate", "--verbosity", "0")
    manage(shop_dsn, "pgqueue_migrate")
    env = {**os.environ, "PGQUEUE_DSN": shop_dsn, "PGQUEUE_TABLE": "shop_jobs",
           "DASHBOARD_TOKEN": "t0ken-of-20-chars!!"}  # fmt: skip
    env.pop("DJANGO_SETTINGS_MODULE", None)
    server = Server(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(APP), "shop_site.asgi:application",
         "--port", "0"],
        env,
    )  # fmt: skip
    try:
        base = server.wait_for("Uvicorn running on ").split("Uvicorn running on ")[1].split()[0]
        admin = {"authorization": "Bearer t0ken-of-20-chars!!"}
        with httpx.Client(base_url=base, timeout=60) as client:
            # Django's own view, beside the dashboard: the order and its task commit.
            body = {"item": "teapot", "email": "ann@example.com", "card": "ok"}
            placed = client.post("/orders", json=body)
            assert placed.status_code == 201, placed.text
            task = placed.json()["task"]

            assert client.get("/pgqueue/").status_code in (401, 403)  # no token, no page
            jobs = client.get("/pgqueue/jobs", headers=admin)
            assert jobs.status_code == 200, jobs.text
            assert f'href="/pgqueue/jobs/{task}"' in jobs.text  # links keep the prefix

            # An action through the prefix: pause the task's queue, as a click would.
            page = client.get("/pgqueue/queues", headers=admin)
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
            assert csrf is not None, page.text
            paused = client.post(
                "/pgqueue/actions/pause-queue",
                data={"csrf": csrf.group(1), "queue": "default", "next": "/pgqueue/queues"},
                headers={**admin, "origin": base},
            )
            assert paused.status_code == 303, paused.text
            assert paused.headers["location"].startswith("/pgqueue/queues")
    finally:
        server.stop(signal.SIGTERM)
    with psycopg.connect(shop_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM shop_jobs").fetchone() == (1,)
        paused_queues = conn.execute("SELECT queue FROM shop_jobs_queues WHERE paused")
        assert paused_queues.fetchall() == [("default",)]
