"""The examples run, as a user would run them, against the suite's server.

These are plain sync tests: each starts an example as a process of its own
and reads what it prints. Each run gets tables of its own (``PGQUEUE_TABLE``),
dropped afterwards, so reruns on a shared server do not collide.
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

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def example_table(dsn: str) -> Iterator[str]:
    name = f"ex_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in (name, f"{name}_orders"):
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def run_example(dsn: str, table: str, script: str, *args: str) -> str:
    env = {**os.environ, "PGQUEUE_DSN": dsn, "PGQUEUE_TABLE": table}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{script} {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


# Every example on every event loop, whichever backend the session selected:
# the examples are separate processes, so a sync test can run them all.
QUICKSTARTS = {
    "sync": ("quickstart_sync.py",),
    "asyncio": ("quickstart_async.py",),
    "trio": ("quickstart_async.py", "--trio"),
}


@pytest.mark.parametrize("flavour", list(QUICKSTARTS))
def test_quickstart_runs_and_drains_its_jobs(dsn: str, example_table: str, flavour: str) -> None:
    script, *args = QUICKSTARTS[flavour]
    out = run_example(dsn, example_table, script, *args)
    if flavour != "sync":
        assert f"event loop: {flavour}" in out
    assert "PGQUEUE_DSN is not set" not in out
    assert "exists: False" in out  # the rolled-back order left no job
    assert "(print_label) failed: no handler for kind 'print_label'; it is now dead" in out
    assert "1 job(s) succeeded; receipts sent for orders [1]" in out
    assert "enqueued 2,000 orders and jobs" in out
    assert "drained 2,000 jobs" in out
    assert "jobs/s" in out
    assert "{'pending': 0, 'running': 0, 'dead': 1}" in out
