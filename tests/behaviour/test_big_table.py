"""The reaper on a big table, under a role's short statement_timeout.

DBAs set a ``statement_timeout`` on application roles, and a queue table can
hold millions of dead jobs awaiting purge. The reaper reads the running rows
through their own small index (migration 6), so it neither reads those
millions nor is cancelled: a crashed worker's jobs come back.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import TypeVar

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqueue.core.ops import QueueCore, WorkerClaim
from pgqueue.core.plans import Query
from pgqueue.sync.driver import run_on

from ..backends import open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio

T = TypeVar("T")

DEAD_JOBS = 1_000_000
LIVE_JOBS = 1_000
# Every statement of the reaper takes well under a millisecond through the
# index; a scan of the table (what the reaper did before migration 6) takes
# about 60 ms on the 2-core machine of docs/performance.md.
STATEMENT_TIMEOUT = "25ms"


@pytest.fixture(scope="module")
def big_table(dsn: str) -> Iterator[str]:
    """A queue table with a million dead jobs and a thousand running ones of a
    live worker, built once for the module (about 2 s)."""
    name = f"big_{uuid.uuid4().hex[:12]}"
    core = QueueCore(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        run_on(conn, core.install())
        raw = Raw(conn, name)
        # A vacuum of the new rows would only compete with the tests for the CPU.
        raw.rows("ALTER TABLE {table} SET (autovacuum_enabled = off)")
        raw.rows(
            "INSERT INTO {table} (kind, status, attempts, run_at, last_error)"
            " SELECT 'old', 'dead', 3, now() - interval '1 day', 'ValueError: boom'"
            "   FROM generate_series(1, %s)",
            DEAD_JOBS,
        )
        raw.rows(
            "INSERT INTO {table} (kind, status, attempts, locked_at, locked_by)"
            " SELECT 'busy', 'running', 1, now(), 'live-worker' FROM generate_series(1, %s)",
            LIVE_JOBS,
        )
        raw.rows("ANALYZE {table}")
    try:
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            run_on(conn, core.uninstall())


def test_the_reaper_reads_the_running_index_not_the_dead_jobs(dsn: str, big_table: str) -> None:
    expired = QueueCore(big_table).sql.maintenance.expired
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(b"EXPLAIN " + expired, (timedelta(minutes=5),)).fetchall()
    plan = "\n".join(r[0] for r in rows)
    assert f"{big_table}_running" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_statements_that_find_running_jobs_by_id_read_the_primary_key(
    dsn: str, big_table: str
) -> None:
    # The running index is the reaper's: a worker's turn, complete and the
    # heartbeat look their jobs up by id, and a scan of the running index
    # for them would cost the drain a third (docs/performance.md).
    core = QueueCore(big_table)
    with psycopg.connect(dsn) as conn:
        running = Raw(conn, big_table).rows("SELECT id FROM {table} WHERE status = 'running'")
        ids = [r[0] for r in running[:100]]
        for operation in (
            core.turns.turn(ids, [], WorkerClaim.of("live-worker"), 100),
            core.complete(ids),
            core.heartbeat(ids, worker="live-worker"),
        ):
            step = next(operation.plan)
            assert isinstance(step, Query)
            rows = conn.execute(b"EXPLAIN " + step.query, step.params).fetchall()
            plan = "\n".join(r[0] for r in rows)
            assert f"{big_table}_running" not in plan, plan
            assert f"{big_table}_pkey" in plan, plan


async def patiently(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, tried again (three times in all) if the statement timeout cancels it.

    A new session's first statements load the catalog and plan, which on a
    loaded machine can take longer than the timeout once; a scan of the
    million dead jobs takes longer every time, so it still fails.
    """
    for attempt in range(3):
        try:
            return await call()
        except psycopg.errors.QueryCanceled:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def test_the_reaper_returns_a_crashed_workers_jobs_under_a_short_statement_timeout(
    dsn: str, big_table: str, backend: str
) -> None:
    limited = make_conninfo(dsn, options=f"-c statement_timeout={STATEMENT_TIMEOUT}")
    with psycopg.connect(limited) as conn, pytest.raises(psycopg.errors.QueryCanceled):
        conn.execute("SELECT pg_sleep(1)")  # the timeout is in force on such connections

    # The worker that crashes claims without a timeout (its claim is not the
    # subject); the reaper runs under the role's timeout.
    async with (
        open_queue(backend, dsn, table=big_table) as q,
        open_queue(backend, limited, table=big_table) as reaper,
    ):
        ids = await q.enqueue_many([("k", n) for n in range(20)])
        assert len(await q.claim(20, worker=f"crashed-{backend}")) == 20
        with psycopg.connect(dsn, autocommit=True) as conn:
            Raw(conn, big_table).rows(
                "UPDATE {table} SET locked_at = now() - interval '1 hour' WHERE id = ANY(%s)", ids
            )

        assert sorted(await patiently(lambda: reaper.reap(timedelta(minutes=5)))) == ids
        # The live worker's jobs stay.
        assert await patiently(lambda: reaper.reap(timedelta(minutes=5))) == []
        again = await q.claim(20)
        assert sorted(j.id for j in again) == ids
        assert await q.complete(*again) == 20
