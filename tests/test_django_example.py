"""examples/django_app runs as its README says, against the suite's server.

Each command is a ``manage.py`` process of its own, on a new database, as
a user would type them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

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
