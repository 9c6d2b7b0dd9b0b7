"""The pytest plugin (`pgqueue.testing.plugin`): its fixtures here, and in a
small project of its own run by pytest in a subprocess (with pytest-xdist).

This suite's conftest gives the plugin its own server (``pgqueue_dsn``);
the subprocess gets it through ``PGQUEUE_TEST_DSN``, as a user's CI would,
and finds the plugin by pyproject's entry point alone (metadata written as
an install writes it: the installed pgqueue here may be another tree's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import psycopg
import pytest

import pgqueue
from pgqueue.testing import aassert_enqueued, adrain, assert_enqueued, drain

from .conftest import SELECTED

ROOT = Path(__file__).resolve().parent.parent
ASYNC_BACKENDS = [b for b in SELECTED if b != "sync"] or ["asyncio"]


@pytest.fixture(params=ASYNC_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_pgqueue_queue_is_an_installed_queue_of_its_own(pgqueue_queue: pgqueue.Queue) -> None:
    assert pgqueue_queue.table.startswith("pgqueue_test_")
    job_id = pgqueue_queue.enqueue("send_receipt", {"order_id": 42})

    assert_enqueued(pgqueue_queue, "send_receipt", payload={"order_id": 42})
    ran = drain(pgqueue_queue, {"send_receipt": lambda job: None})

    assert ran.succeeded == [job_id]


@pytest.mark.anyio
async def test_pgqueue_async_queue_on_each_event_loop(
    pgqueue_async_queue: pgqueue.AsyncQueue,
) -> None:
    @pgqueue_async_queue.task(kind="shop.ship")
    async def ship(order_id: int) -> None:
        await ping.enqueue(order_id)

    pinged: list[int] = []

    @pgqueue_async_queue.task(kind="shop.ping")
    def ping(order_id: int) -> None:
        pinged.append(order_id)

    await ship.enqueue(7)
    await aassert_enqueued(pgqueue_async_queue, "shop.ship", payload={"args": [7]})

    drained = await adrain(pgqueue_async_queue)

    assert len(drained.succeeded) == 2 and pinged == [7]


def test_pyproject_declares_the_plugin_as_a_pytest_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plugins = project["project"]["entry-points"]["pytest11"]
    # Named as the module: a conftest's pytest_plugins naming it loads it once.
    assert plugins == {"pgqueue.testing.plugin": "pgqueue.testing.plugin"}


PROJECT_TESTS = """
import os

import pytest

import pgqueue
from pgqueue.testing import aassert_not_enqueued, adrain, assert_enqueued, drain


def checkout(queue, order_id):
    queue.enqueue("send_receipt", {"order_id": order_id})


@pytest.mark.parametrize("order_id", range(4))
def test_checkout_enqueues_a_receipt(pgqueue_queue, order_id):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    assert f"_{worker}_" in pgqueue_queue.table
    checkout(pgqueue_queue, order_id)
    (job,) = assert_enqueued(pgqueue_queue, "send_receipt")  # the table is this test's
    assert job.payload == {"order_id": order_id}
    assert drain(pgqueue_queue, {"send_receipt": lambda job: None}).succeeded == [job.id]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


@pytest.mark.anyio
async def test_async_queue(pgqueue_async_queue):
    await pgqueue_async_queue.enqueue("ping")
    drained = await adrain(pgqueue_async_queue, {"ping": lambda job: None})
    assert len(drained.succeeded) == 1
    await aassert_not_enqueued(pgqueue_async_queue)
"""


def entry_points_only(site: Path) -> None:
    """A distribution's metadata in ``site`` holding pyproject's pytest11
    entry points, as an install writes them (the code comes from PYTHONPATH):
    pytest finds the plugin the way it does once pgqueue is installed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plugins = project["project"]["entry-points"]["pytest11"]
    info = site / "pgqueue_jobs-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pgqueue-jobs\nVersion: 0.0\n")
    lines = [f"{name} = {target}" for name, target in plugins.items()]
    (info / "entry_points.txt").write_text("[pytest11]\n" + "\n".join(lines) + "\n")


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_project_finds_the_fixtures_by_the_entry_point_in_a_subprocess(
    tmp_path: Path, empty_database: str, xdist: list[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_shop.py").write_text(textwrap.dedent(PROJECT_TESTS))
    entry_points_only(tmp_path / "site")
    path = os.pathsep.join([str(tmp_path / "site"), str(ROOT)])
    env = {**os.environ, "PGQUEUE_TEST_DSN": empty_database, "PYTHONPATH": path}
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *xdist,
               str(project)]  # fmt: skip
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout  # 4 + the async test on asyncio and trio
    # Every test's tables were dropped after it.
    with psycopg.connect(empty_database) as conn:
        left = conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'pgqueue_test%'")
        assert left.fetchall() == []
