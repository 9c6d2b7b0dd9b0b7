"""The three ways the behaviour suite reaches a queue: sync, asyncio and trio.

Every test is written once against an awaitable queue. For the sync
backend, `SyncAsAsync` runs each `pgqueue.Queue` call in a worker thread, so
concurrent tasks are concurrent threads on the sync API.

With ``PGQUEUE_TEST_PGBOUNCER=1`` (``nox -s tests-pgbouncer``) the suite's
``dsn`` is a PgBouncer in transaction mode in front of the server
(`tests.bouncer`): queues are opened with ``transaction_pooling=True``, the
application's connections prepare no statements, and a worker LISTENs on
the server itself (``listen_conninfo``), as docs/pgbouncer.md says to.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgqueue

BACKENDS = ("sync", "asyncio", "trio")

THROUGH_PGBOUNCER = os.environ.get("PGQUEUE_TEST_PGBOUNCER", "") not in ("", "0")
# What a queue, and a connection of the application's, need through a transaction pooler.
QUEUE_OPTIONS: dict[str, Any] = {"transaction_pooling": True} if THROUGH_PGBOUNCER else {}
CONNECT_OPTIONS: dict[str, Any] = {"prepare_threshold": None} if THROUGH_PGBOUNCER else {}


class Direct:
    """The server behind PgBouncer, once conftest's ``dsn`` fixture started it."""

    server: str | None = None

    @classmethod
    def listen_conninfo(cls, conninfo: str) -> str | None:
        """The server's own DSN for the database ``conninfo`` reaches through PgBouncer."""
        if cls.server is None:
            return None
        dbname = conninfo_to_dict(conninfo).get("dbname")
        return make_conninfo(cls.server, dbname=dbname) if dbname else cls.server


class SyncAsAsync:
    """A sync `Queue` whose methods are awaited, each call in a worker thread."""

    def __init__(self, queue: pgqueue.Queue) -> None:
        self.sync = queue

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.sync, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await anyio.to_thread.run_sync(functools.partial(attr, *args, **kwargs))

        return call


@asynccontextmanager
async def open_queue(backend: str, dsn: str, **options: Any) -> AsyncIterator[Any]:
    options = {**QUEUE_OPTIONS, **options}
    if backend == "sync":
        q = pgqueue.Queue(dsn, **options)
        try:
            yield SyncAsAsync(q)
        finally:
            await anyio.to_thread.run_sync(q.close)
    else:
        async with pgqueue.AsyncQueue(dsn, **options) as aq:
            yield aq


class Business:
    """The application: an ``orders`` table and a connection of its own.

    ``transaction()`` yields the connection to pass as ``conn=``: a
    ``psycopg.AsyncConnection`` on asyncio, a sync ``psycopg.Connection``
    (driven from worker threads) for the sync and trio backends.
    """

    def __init__(self, orders: str) -> None:
        self.orders = sql.Identifier(orders)

    def compose(self, query: str) -> sql.Composed:
        return sql.SQL(query).format(orders=self.orders)

    async def execute(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def transaction(self) -> Any:
        raise NotImplementedError


class ThreadBusiness(Business):
    def __init__(self, conn: psycopg.Connection[Any], orders: str) -> None:
        super().__init__(orders)
        self.conn = conn

    async def execute(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        def run() -> list[tuple[Any, ...]]:
            cur = self.conn.execute(self.compose(query), params or None)
            return cur.fetchall() if cur.description else []

        return await anyio.to_thread.run_sync(run)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.Connection[Any]]:
        tx = self.conn.transaction()
        await anyio.to_thread.run_sync(tx.__enter__)
        try:
            yield self.conn
        except BaseException as exc:
            await anyio.to_thread.run_sync(tx.__exit__, type(exc), exc, exc.__traceback__)
            raise
        else:
            await anyio.to_thread.run_sync(tx.__exit__, None, None, None)


class AsyncBusiness(Business):
    def __init__(self, conn: psycopg.AsyncConnection[Any], orders: str) -> None:
        super().__init__(orders)
        self.conn = conn

    async def execute(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        cur = await self.conn.execute(self.compose(query), params or None)
        return await cur.fetchall() if cur.description else []

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self.conn.transaction():
            yield self.conn


@asynccontextmanager
async def make_business(backend: str, dsn: str, *, orders: str) -> AsyncIterator[Business]:
    b: Business
    if backend == "asyncio":
        aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, **CONNECT_OPTIONS)
        b = AsyncBusiness(aconn, orders)
        close: Callable[[], Any] = aconn.close
    else:
        conn = await anyio.to_thread.run_sync(
            functools.partial(psycopg.connect, dsn, autocommit=True, **CONNECT_OPTIONS)
        )
        b = ThreadBusiness(conn, orders)

        async def close() -> None:
            await anyio.to_thread.run_sync(conn.close)

    await b.execute("CREATE TABLE {orders} (id serial PRIMARY KEY, item text NOT NULL)")
    try:
        yield b
    finally:
        await b.execute("DROP TABLE IF EXISTS {orders}")
        await close()


class WorkerUnderTest:
    """A worker of the backend under test, with an awaitable `run`."""

    def __init__(self, backend: str, queue: Any, handlers: dict[str, Any], **options: Any) -> None:
        options.setdefault("handle_signals", False)
        if Direct.server is not None and "listen_conninfo" not in options:
            options["listen_conninfo"] = Direct.listen_conninfo(queue.conninfo)
        self.backend = backend
        if backend == "sync":
            self.worker: Any = pgqueue.Worker(queue.sync, handlers, **options)
        else:
            self.worker = pgqueue.AsyncWorker(queue, handlers, **options)

    async def run(self, *, until_empty: bool = False) -> None:
        if self.backend == "sync":
            run = functools.partial(self.worker.run, until_empty=until_empty)
            await anyio.to_thread.run_sync(run)
        else:
            await self.worker.run(until_empty=until_empty)

    def stop(self) -> None:
        self.worker.stop()
