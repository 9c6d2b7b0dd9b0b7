"""pgqueue through a real PgBouncer in transaction pooling mode (docs/pgbouncer.md).

Each test starts from the suite's server and a PgBouncer of this module's
in front of it (`tests.bouncer`), whatever ``PGQUEUE_TEST_PGBOUNCER`` says:
``nox -s tests-pgbouncer`` runs this module beside the behaviour suite
through the pooler.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import pgqueue

from ..backends import WorkerUnderTest, open_queue
from ..bouncer import pgbouncer
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# Generous: a deadline for "it happened at all", never a performance claim.
PATIENCE = 20


@pytest.fixture(scope="module")
def bouncer(server_dsn: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of the suite's server, with a
    pool of 2 server connections: the clients share them."""
    with pgbouncer(server_dsn, pool_size=2) as url:
        yield url


async def wait_until(condition: Any, what: str) -> None:
    """Re-check a database condition until it holds."""
    with anyio.fail_after(PATIENCE):
        while not condition():  # noqa: ASYNC110 - the condition lives in the database
            await anyio.sleep(0.05)


def listening_sessions(raw: Raw, queue: Any) -> int:
    """Server sessions whose last statement was the queue's LISTEN (a listener
    pings with it every second; a pooled session runs other statements too)."""
    listen = queue.core.sql.listen.decode()
    return int(raw.one("SELECT count(*) FROM pg_stat_activity WHERE query = %s", listen))


async def test_every_queue_operation_works_through_the_pooler(
    bouncer: str, table: str, backend: str, raw: Raw
) -> None:
    # Many more statements than psycopg's prepare threshold (5), from more
    # client connections than the pooler has server connections: a
    # statement prepared on one server session would be missing on another.
    async with open_queue(backend, bouncer, table=table, transaction_pooling=True,
                          max_connections=4) as q:  # fmt: skip
        await q.install()
        ids = [await q.enqueue("k", {"i": i}) for i in range(12)]
        ids += await q.enqueue_many([("k", {"i": i}) for i in range(12, 40)])
        claimed = []
        async with anyio.create_task_group() as tg:
            for n in range(4):

                async def claim(n: int = n) -> None:
                    for _ in range(10):
                        claimed.extend(await q.claim(1, worker=f"w{n}"))

                tg.start_soon(claim)
        assert sorted(j.id for j in claimed) == ids
        await q.complete(*claimed[:30])
        for job in claimed[30:35]:
            assert await q.fail(job, "no", retry_in=timedelta(0)) is pgqueue.JobStatus.PENDING
        raw.rows("UPDATE {table} SET locked_at = now() - interval '1 h' WHERE status = 'running'")
        assert sorted(await q.reap(timedelta(minutes=1))) == sorted(j.id for j in claimed[35:])
        assert raw.count("status = 'pending'") == 10
        assert (await q.stats()).by_status[pgqueue.JobStatus.PENDING] == 10


async def test_worker_without_a_direct_connection_drains_by_polling(
    bouncer: str, table: str, backend: str, raw: Raw, caplog: pytest.LogCaptureFixture
) -> None:
    # No listen_conninfo: nothing can LISTEN, so jobs enqueued while the
    # worker is idle are found by its poll.
    handled: list[int] = []
    done = threading.Event()

    def work(job: pgqueue.Job) -> None:
        handled.append(job.id)
        if len(handled) == 50:
            done.set()

    caplog.set_level(logging.INFO, logger="pgqueue.worker")
    async with open_queue(backend, bouncer, table=table, transaction_pooling=True) as q:
        await q.install()
        worker = WorkerUnderTest(backend, q, {"work": work}, poll_interval=0.1,
                                 listen_conninfo=None)  # fmt: skip
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            await wait_until(lambda: "no LISTEN through a transaction pooler" in caplog.text,
                             "the worker to start")  # fmt: skip
            ids = await q.enqueue_many([("work", i) for i in range(25)])
            for i in range(25):
                ids.append(await q.enqueue("work", i))
            assert await anyio.to_thread.run_sync(done.wait, PATIENCE)
            assert listening_sessions(raw, q) == 0
            worker.stop()
    assert sorted(handled) == sorted(ids)
    assert raw.count() == 0


async def test_worker_listens_on_the_server_through_listen_conninfo(
    bouncer: str, server_dsn: str, table: str, backend: str, raw: Raw
) -> None:
    # A poll ten minutes away: only the notification, sent through the
    # pooler at commit and heard on the direct connection, wakes the worker.
    handled = threading.Event()
    async with open_queue(backend, bouncer, table=table, transaction_pooling=True) as q:
        await q.install()
        worker = WorkerUnderTest(backend, q, {"ping": lambda job: handled.set()},
                                 poll_interval=600, listen_conninfo=server_dsn)  # fmt: skip
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            await wait_until(lambda: listening_sessions(raw, q) == 1, "the listener")
            await q.enqueue("ping")
            assert await anyio.to_thread.run_sync(handled.wait, PATIENCE)
            worker.stop()


async def test_wait_polls_for_a_result_through_the_pooler(
    bouncer: str, table: str, backend: str
) -> None:
    async with open_queue(backend, bouncer, table=table, transaction_pooling=True) as q:
        await q.install()
        job_id = await q.enqueue("double", {"n": 21}, result_ttl=timedelta(minutes=1))
        worker = WorkerUnderTest(backend, q, {"double": lambda job: job.payload["n"] * 2})
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            assert await q.wait(job_id, timeout=PATIENCE) == 42
            worker.stop()


async def test_rolled_back_enqueue_through_the_pooler_leaves_no_job(
    bouncer: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, bouncer, table=table, transaction_pooling=True) as q:
        await q.install()

        def enqueue_in_a_transaction(commit: bool) -> None:
            with (
                psycopg.connect(bouncer, prepare_threshold=None) as conn,
                conn.transaction(force_rollback=not commit),
            ):
                q_sync.enqueue("k", {"commit": commit}, conn=conn)

        q_sync = pgqueue.Queue(bouncer, table=table, transaction_pooling=True)
        try:
            await anyio.to_thread.run_sync(enqueue_in_a_transaction, False)
            await anyio.to_thread.run_sync(enqueue_in_a_transaction, True)
        finally:
            q_sync.close()
    assert raw.rows("SELECT payload FROM {table}") == [({"commit": True},)]


def test_a_pool_that_prepares_statements_is_refused_behind_a_pooler(bouncer: str) -> None:
    preparing = ConnectionPool(bouncer, open=False)
    with pytest.raises(ValueError, match="prepare_threshold"):
        pgqueue.Queue(preparing, transaction_pooling=True)
    with pytest.raises(ValueError, match="prepare_threshold"):
        pgqueue.AsyncQueue(AsyncConnectionPool(bouncer, open=False), transaction_pooling=True)
    with pytest.raises(TypeError, match="transaction_pooling must be a bool"):
        pgqueue.Queue(bouncer, transaction_pooling="yes")  # type: ignore[arg-type]
    # Built as docs/pgbouncer.md says, the pool is taken.
    fine = ConnectionPool(bouncer, kwargs={"prepare_threshold": None}, open=False)
    assert pgqueue.Queue(fine, transaction_pooling=True).core.transaction_pooling


def test_the_fixture_reaches_the_server_through_pgbouncer(bouncer: str, server_dsn: str) -> None:
    # Guards the rest: the DSN under test is PgBouncer's, not the server's.
    assert conninfo_to_dict(bouncer)["host"] == "127.0.0.1"
    with psycopg.connect(bouncer, dbname="pgbouncer", autocommit=True) as admin:
        pools = admin.execute("SHOW POOLS").fetchall()
        names = [d.name for d in admin.execute("SHOW POOLS").description or []]
    modes = {row[names.index("pool_mode")] for row in pools if row[0] != "pgbouncer"}
    assert modes == {"transaction"}


# -- the integrations' and the command line's settings ------------------------------------------


def test_flask_app_with_the_setting_enqueues_and_drains_through_the_pooler(
    bouncer: str, table: str, raw: Raw
) -> None:
    from flask import Flask

    from pgqueue.contrib.flask import PgQueue

    pgq = PgQueue()
    app = Flask(__name__)
    app.config.update(
        PGQUEUE_DSN=bouncer, PGQUEUE_TABLE=table, PGQUEUE_MAX_CONNECTIONS=3,
        PGQUEUE_TRANSACTION_POOLING=True,
    )  # fmt: skip
    pgq.init_app(app)
    done: list[int] = []
    pgq.handler("k")(lambda job: done.append(job.payload["i"]))
    try:
        assert app.test_cli_runner().invoke(args=["pgqueue", "migrate"]).exit_code == 0
        with app.app_context():
            # More enqueues than psycopg's prepare threshold, on pooled
            # connections that share the pooler's two server sessions.
            for i in range(12):
                with pgq.transaction():
                    pgq.enqueue("k", {"i": i})
        pgq.worker(app, concurrency=2, batch_size=1, handle_signals=False).run(until_empty=True)
    finally:
        pgq.close(app)
    assert sorted(done) == list(range(12))
    assert raw.count() == 0


def test_operator_commands_take_transaction_pooling(
    bouncer: str, table: str, raw: Raw, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgqueue.cli import build_parser, main
    from pgqueue.cli.operate import run_on_queue

    common = ["--dsn", bouncer, "--table", table, "--transaction-pooling"]
    # The flag reaches the queue the command runs on (and its absence too).
    seen: list[bool] = []

    def record(q: pgqueue.Queue, _: Any) -> int:
        seen.append(q.core.transaction_pooling)
        return 0

    for given in (common, common[:-1]):
        args = build_parser().parse_args(["stats", *given])
        assert run_on_queue(record, args) == 0
    assert seen == [True, False]
    assert main(["migrate", *common]) == 0
    for i in range(7):
        assert main(["enqueue", "k", f'{{"i": {i}}}', *common]) == 0
    capsys.readouterr()
    assert main(["stats", "--json", *common]) == 0
    assert json.loads(capsys.readouterr().out)["by_status"]["pending"] == 7
    assert raw.count() == 7
