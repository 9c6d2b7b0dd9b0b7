"""pgqueue.contrib.sqlalchemy: a job enqueued on a session's connection
commits and rolls back with the session's writes (sync Session and AsyncSession)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session, scoped_session, sessionmaker

import pgqueue
from pgqueue.contrib.sqlalchemy import async_psycopg_connection, psycopg_connection

from ..conftest import Raw


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # SQLAlchemy's asyncio extension runs on asyncio only


@pytest.fixture
def orders(dsn: str, table: str) -> Iterator[str]:
    name = f"{table}_orders"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE TABLE "{name}" (id serial PRIMARY KEY, item text NOT NULL)')
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{name}"')


@pytest.fixture
def queue(dsn: str, table: str) -> Iterator[pgqueue.Queue]:
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        yield q


@pytest.fixture
def engine(dsn: str) -> Iterator[Engine]:
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    yield engine
    engine.dispose()


@pytest.fixture
async def async_engine(dsn: str) -> AsyncIterator[AsyncEngine]:
    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(dsn)

    engine = create_async_engine("postgresql+psycopg://", async_creator=connect)
    yield engine
    await engine.dispose()


@pytest.fixture
async def async_queue(dsn: str, table: str) -> AsyncIterator[pgqueue.AsyncQueue]:
    async with pgqueue.AsyncQueue(dsn, table=table) as q:
        await q.install()
        yield q


def insert(orders: str, item: str) -> Any:
    return text(f'INSERT INTO "{orders}" (item) VALUES (:item)').bindparams(item=item)


def test_committed_session_commits_its_job_with_its_rows(
    engine: Engine, queue: pgqueue.Queue, orders: str, raw: Raw
) -> None:
    with Session(engine) as session, session.begin():
        session.execute(insert(orders, "teapot"))
        job_id = queue.enqueue("send_receipt", {"item": "teapot"}, conn=psycopg_connection(session))
        # Not committed yet: nobody else sees the job.
        assert raw.count("id = %s", job_id) == 0
    assert raw.count("id = %s", job_id) == 1
    assert raw.rows(f'SELECT item FROM "{orders}"') == [("teapot",)]


def test_a_session_connection_given_as_is_names_the_helper_and_writes_nothing(
    engine: Engine, queue: pgqueue.Queue, raw: Raw
) -> None:
    with (
        Session(engine) as session,
        session.begin(),
        pytest.raises(
            TypeError,
            match=r"sqlalchemy\..*Connection; from a SQLAlchemy "
            r"session, pass pgqueue\.contrib\.sqlalchemy\.psycopg_connection",
        ),
    ):
        queue.enqueue("send_receipt", conn=session.connection())  # type: ignore[arg-type]
    assert raw.count() == 0


def test_rolled_back_session_leaves_no_job(
    engine: Engine, queue: pgqueue.Queue, orders: str, raw: Raw
) -> None:
    with Session(engine) as session:
        session.execute(insert(orders, "teapot"))
        queue.enqueue("send_receipt", {"item": "teapot"}, conn=psycopg_connection(session))
        session.rollback()
    with pytest.raises(LookupError), Session(engine) as session, session.begin():
        queue.enqueue("send_receipt", {"item": "kettle"}, conn=psycopg_connection(session))
        raise LookupError("out of kettles")  # leaving begin() with an exception rolls back
    assert raw.count() == 0
    assert raw.rows(f'SELECT item FROM "{orders}"') == []


def test_scoped_session_and_core_connection_join_their_transaction(
    engine: Engine, queue: pgqueue.Queue, orders: str, raw: Raw
) -> None:
    scoped = scoped_session(sessionmaker(engine))
    scoped.execute(insert(orders, "teapot"))
    kept = queue.enqueue("send_receipt", {"item": "teapot"}, conn=psycopg_connection(scoped))
    scoped.commit()
    scoped.remove()
    with engine.connect() as connection:
        queue.enqueue("send_receipt", {"item": "kettle"}, conn=psycopg_connection(connection))
        connection.rollback()
        # The helper began the connection's transaction, so commit() commits the job.
        also = queue.enqueue("send_receipt", {"item": "cosy"}, conn=psycopg_connection(connection))
        connection.commit()
    assert sorted(r[0] for r in raw.rows("SELECT id FROM {table}")) == [kept, also]


def test_enqueue_many_joins_the_session(
    engine: Engine, queue: pgqueue.Queue, orders: str, raw: Raw
) -> None:
    specs = [("send_receipt", {"n": n}) for n in range(3)]
    with Session(engine) as session:
        queue.enqueue_many(specs, conn=psycopg_connection(session))
        session.rollback()
        assert raw.count() == 0
        ids = queue.enqueue_many(specs, conn=psycopg_connection(session))
        session.commit()
    assert sorted(r[0] for r in raw.rows("SELECT id FROM {table}")) == sorted(ids)


def test_a_job_enqueued_in_a_nested_transaction_rolls_back_with_its_savepoint(
    engine: Engine, queue: pgqueue.Queue, orders: str, raw: Raw
) -> None:
    with Session(engine) as session, session.begin():
        kept = queue.enqueue("send_receipt", {"n": 1}, conn=psycopg_connection(session))
        nested = session.begin_nested()
        session.execute(insert(orders, "kettle"))
        queue.enqueue("send_receipt", {"n": 2}, conn=psycopg_connection(session))
        nested.rollback()
    assert [r[0] for r in raw.rows("SELECT id FROM {table}")] == [kept]
    assert raw.rows(f'SELECT item FROM "{orders}"') == []


def test_an_engine_that_is_not_psycopg_is_refused_before_anything_is_written(
    queue: pgqueue.Queue, raw: Raw
) -> None:
    sqlite = create_engine("sqlite://")
    with Session(sqlite) as session, pytest.raises(TypeError, match="postgresql\\+psycopg"):
        psycopg_connection(session)
    with pytest.raises(TypeError, match="Session or Connection"):
        psycopg_connection("postgresql://localhost/shop")  # type: ignore[arg-type]
    assert raw.count() == 0


@pytest.mark.anyio
async def test_committed_async_session_commits_its_job_with_its_rows(
    async_engine: AsyncEngine, async_queue: pgqueue.AsyncQueue, orders: str, raw: Raw
) -> None:
    async with AsyncSession(async_engine) as session, session.begin():
        await session.execute(insert(orders, "teapot"))
        conn = await async_psycopg_connection(session)
        job_id = await async_queue.enqueue("send_receipt", {"item": "teapot"}, conn=conn)
        assert raw.count("id = %s", job_id) == 0
    assert raw.count("id = %s", job_id) == 1
    assert raw.rows(f'SELECT item FROM "{orders}"') == [("teapot",)]


@pytest.mark.anyio
async def test_rolled_back_async_session_leaves_no_job(
    async_engine: AsyncEngine, async_queue: pgqueue.AsyncQueue, orders: str, raw: Raw
) -> None:
    async with AsyncSession(async_engine) as session:
        await session.execute(insert(orders, "teapot"))
        conn = await async_psycopg_connection(session)
        await async_queue.enqueue("send_receipt", {"item": "teapot"}, conn=conn)
        await session.rollback()
    with pytest.raises(LookupError):
        async with AsyncSession(async_engine) as session, session.begin():
            conn = await async_psycopg_connection(session)
            await async_queue.enqueue("send_receipt", {"item": "kettle"}, conn=conn)
            raise LookupError("out of kettles")
    assert raw.count() == 0
    assert raw.rows(f'SELECT item FROM "{orders}"') == []


@pytest.mark.anyio
async def test_async_connection_joins_its_transaction(
    async_engine: AsyncEngine, async_queue: pgqueue.AsyncQueue, raw: Raw
) -> None:
    async with async_engine.connect() as connection:
        conn = await async_psycopg_connection(connection)
        await async_queue.enqueue("send_receipt", {"n": 1}, conn=conn)
        await connection.rollback()
        # The helper begins the next transaction, so commit() commits the job.
        conn = await async_psycopg_connection(connection)
        job_id = await async_queue.enqueue("send_receipt", {"n": 2}, conn=conn)
        await connection.commit()
    assert [r[0] for r in raw.rows("SELECT id FROM {table}")] == [job_id]


@pytest.mark.anyio
async def test_an_async_engine_that_is_not_psycopg_is_refused(raw: Raw) -> None:
    with pytest.raises(TypeError, match="AsyncSession or AsyncConnection"):
        await async_psycopg_connection(Session())  # type: ignore[arg-type]
