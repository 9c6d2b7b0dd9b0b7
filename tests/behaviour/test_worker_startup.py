"""Regressions of the worker's start-up and second run, on a real server, on every backend.

- A pool built with connection keyword arguments: the LISTEN connection is
  made as the pool makes its own, and jobs run (they never did).
- LISTEN refused (a role allowed one connection, which the pool holds):
  the worker polls from its first second and `stop()` returns.
- A second `run()` on the same worker idles instead of spinning.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import pgqueue
from pgqueue.core.ops import WorkerClaim

from ..backends import SyncAsAsync, WorkerUnderTest, open_queue
from .test_worker import PATIENCE, listener_pids, wait_for, wait_until

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def queue_on_a_pool_with_kwargs(backend: str, dsn: str, table: str) -> AsyncIterator[Any]:
    """A queue over a pool whose conninfo names only the database: the
    server's address and the user come as keyword arguments."""
    params = conninfo_to_dict(dsn)
    dbname = params.pop("dbname")
    kwargs = {**params, "autocommit": True}
    if backend == "asyncio":
        apool = AsyncConnectionPool(f"dbname={dbname}", kwargs=kwargs, min_size=1, open=False)
        await apool.open(wait=True)
        try:
            yield pgqueue.AsyncQueue(apool, table=table)
        finally:
            await apool.close()
        return
    pool = ConnectionPool(f"dbname={dbname}", kwargs=kwargs, min_size=1, open=False)
    await anyio.to_thread.run_sync(lambda: pool.open(wait=True))
    try:
        if backend == "sync":
            yield SyncAsAsync(pgqueue.Queue(pool, table=table))
        else:
            yield pgqueue.AsyncQueue(pool, table=table)
    finally:
        await anyio.to_thread.run_sync(pool.close)


async def test_worker_on_a_pool_built_with_kwargs_listens_and_runs_jobs(
    dsn: str, table: str, backend: str, raw: Any
) -> None:
    handled = threading.Event()
    async with queue_on_a_pool_with_kwargs(backend, dsn, table) as q:
        await q.install()
        # A long poll: only the notification can wake the worker in time.
        worker = WorkerUnderTest(backend, q, {"ping": lambda job: handled.set()},
                                 poll_interval=600)  # fmt: skip
        with anyio.fail_after(PATIENCE):
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await wait_until(lambda: listener_pids(raw, q), "listener up")
                await q.enqueue("ping")
                await wait_for(handled)
                worker.stop()


@pytest.fixture
def one_connection_role(dsn: str, table: str) -> Iterator[str]:
    """A login role allowed a single connection, with what a worker needs on the table."""
    role = f"r_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 1").format(
            sql.Identifier(role)))  # fmt: skip
    try:
        yield make_conninfo(dsn, user=role)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


async def test_worker_whose_listen_is_refused_polls_from_the_start_and_stops_when_asked(
    dsn: str,
    table: str,
    backend: str,
    one_connection_role: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with open_queue(backend, dsn, table=table) as owner:
        await owner.install()
    with psycopg.connect(dsn, autocommit=True) as conn:
        role = sql.Identifier(str(conninfo_to_dict(one_connection_role)["user"]))
        tables = (
            "queues",
            "unique_leases",
            "schedules",
            "results",
            "limits",
            "limit_slots",
            "dependencies",
        )
        for granted in (table, *(f"{table}_{name}" for name in tables)):
            conn.execute(sql.SQL("GRANT ALL ON {} TO {}").format(sql.Identifier(granted), role))
        conn.execute(sql.SQL("GRANT ALL ON SEQUENCE {} TO {}").format(
            sql.Identifier(f"{table}_id_seq"), role))  # fmt: skip
    handled = threading.Event()
    async with open_queue(backend, one_connection_role, table=table,
                          max_connections=1) as q:  # fmt: skip
        await q.enqueue("ping")
        worker = WorkerUnderTest(backend, q, {"ping": lambda job: handled.set()},
                                 poll_interval=0.2)  # fmt: skip
        with anyio.fail_after(PATIENCE):
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await wait_for(handled)
                # LISTEN is tried once a first claim came back; it is refused.
                await wait_until(lambda: "polling meanwhile" in caplog.text, "LISTEN refused")
                worker.stop()
    assert "too many connections for role" in caplog.text


async def test_a_second_run_of_the_same_worker_idles(
    queue: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = 0
    cycle = pgqueue.AsyncQueue._turn

    async def counted(self: pgqueue.AsyncQueue, *args: Any, **kwargs: Any) -> Any:
        nonlocal claims
        claims += 1
        return await cycle(self, *args, **kwargs)

    await queue.enqueue_many([("ping", i) for i in range(3)])
    worker = WorkerUnderTest(backend, queue, {"ping": lambda job: None}, poll_interval=0.1)
    await worker.run(until_empty=True)
    assert await queue.stats() is not None
    monkeypatch.setattr(pgqueue.AsyncQueue, "_turn", counted)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await anyio.sleep(0.5)  # the window in which claims are counted
        worker.stop()
    # About one claim per poll; a spinning worker makes thousands.
    assert 1 <= claims <= 15


async def test_claims_cancelled_by_a_statement_timeout_are_retried_smaller(
    dsn: str, table: str, backend: str, queue: Any, raw: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await queue.enqueue_many([("ping", i) for i in range(30_000)])
    # The worker's connections run under a short statement_timeout, as a DBA
    # might set on an application role: a claim of 30,000 jobs cannot finish
    # in 50 ms, while one of a few jobs does even on a loaded machine (under
    # 5 ms, three suites at once once kept even a 1-job claim from it).
    short = make_conninfo(dsn, options="-c statement_timeout=50ms")
    async with open_queue(backend, short, table=table) as q:
        worker = WorkerUnderTest(backend, q, {"ping": lambda job: None}, batch_size=30_000)
        with anyio.fail_after(PATIENCE * 3):
            await worker.run(until_empty=True)
    assert raw.count() == 0
    assert "claiming at most" in caplog.text


async def test_a_claim_stops_at_the_job_that_takes_it_past_claim_bytes(queue: Any) -> None:
    small = "a" * 1000  # stored as is: about 1 KB each
    large = "b" * 100_000  # compressed when stored; counted by its size as text
    await queue.enqueue_many([("small", {"s": small}) for _ in range(10)])
    turn = await queue._turn([], [], WorkerClaim.of("w", claim_bytes=3000), 10)
    # 0, ~1 KB and ~2 KB come before the first three: under 3,000 bytes.
    assert len(turn.claimed) == 3
    turn = await queue._turn([], [], WorkerClaim.of("w", claim_bytes=1), 10)
    assert len(turn.claimed) == 1  # the first job always comes
    await queue.enqueue_many(
        [
            (
                "large",
                {"s": large},
            )
            for _ in range(3)
        ]
    )
    turn = await queue._turn([], [], WorkerClaim.of("w", kinds=["large"], claim_bytes=150_000), 10)
    assert [j.kind for j in turn.claimed] == ["large", "large"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
async def test_claim_bytes_must_be_a_positive_int(queue: Any, bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="claim_bytes"):
        await queue._turn([], [], WorkerClaim.of("w", claim_bytes=bad), 10)
    with pytest.raises((TypeError, ValueError), match="claim_bytes"):
        pgqueue.AsyncWorker(queue, claim_bytes=bad)


async def test_a_worker_on_a_table_never_installed_raises_undefined_table(
    backend: str, dsn: str, table: str
) -> None:
    # docs/errors.md: an operation before install() raises UndefinedTable;
    # the worker's run raises it as it is, not in the task groups it runs in.
    async with open_queue(backend, dsn, table=table) as q:
        worker = WorkerUnderTest(backend, q, {"k": lambda job: None})
        with anyio.fail_after(PATIENCE), pytest.raises(psycopg.errors.UndefinedTable) as raised:
            await worker.run()
    assert f'relation "{table}' in str(raised.value)


def unopened_queue(backend: str, dsn: str, table: str) -> Any:
    if backend == "sync":
        return SyncAsAsync(pgqueue.Queue(dsn, table=table))
    return pgqueue.AsyncQueue(dsn, table=table)


def pool_left_open(q: Any) -> bool:
    """Whether the queue's own pool was opened (and would be retrying)."""
    if isinstance(q, SyncAsAsync):
        return not q.sync._driver.pool.closed
    chosen = q._driver._chosen
    return chosen is not None and chosen.owned_pool() is None


@pytest.mark.parametrize("first", ["open", "enqueue"])
async def test_a_wrong_dsn_raises_the_servers_reason_and_leaves_no_pool_behind(
    backend: str, dsn: str, table: str, first: str
) -> None:
    wrong = make_conninfo(dsn, dbname=f"no_such_db_{uuid.uuid4().hex[:8]}")
    queue = unopened_queue(backend, wrong, table)
    with anyio.fail_after(PATIENCE), pytest.raises(psycopg.OperationalError) as raised:
        if first == "open":
            await queue.open()
        else:
            await queue.enqueue("k")
    assert "does not exist" in str(raised.value)  # the server's own reason
    assert not pool_left_open(queue)
    await queue.close()


async def test_a_worker_started_before_the_server_answers_opens_its_pool_without_a_probe(
    backend: str, dsn: str, table: str
) -> None:
    # A worker rides an outage out on its pool's own retries (docs/reliability.md):
    # its run opens the pool without the API's one-shot connection.
    q = unopened_queue(backend, make_conninfo(dsn, dbname=f"no_such_db_{uuid.uuid4().hex[:8]}"),
                       table)  # fmt: skip
    try:
        worker = WorkerUnderTest(backend, q, {"k": lambda job: None})
        worker.stop()  # a stop before a run: the run opens the queue, then stops at once
        with anyio.fail_after(PATIENCE):
            await worker.run()
        assert pool_left_open(q)  # and retrying, as the worker's recovery needs
    finally:
        await q.close()
