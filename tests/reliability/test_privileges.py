"""Scenario 8: the queue runs under a role with only the grants docs/reliability.md lists.

The owner (here the server's superuser) installs the table; a separate
login role, neither superuser nor owner, with no right to create anything,
then enqueues (one job, a small batch, a COPY batch), runs a serving worker
(claims, completions, failures, the reaper, LISTEN), and calls
``heartbeat``, ``reap``, ``stats``, ``get``, ``fail`` and ``retry``. Any privilege the
runtime needs beyond the documented grants fails this test.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta

import anyio
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgqueue

from ..backends import WorkerUnderTest, open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# The grants of docs/reliability.md, "Least privilege", word for word but for the names.
GRANTS = (
    "GRANT USAGE ON SCHEMA public TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {role}",
    "GRANT USAGE ON SEQUENCE {sequence} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON {queues}, {leases}, {schedules} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON {results}, {limits}, {slots} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON {dependencies} TO {role}",
)
# With history=True, as the same section says.
HISTORY_GRANT = "GRANT SELECT, INSERT, DELETE ON {history} TO {role}"


@pytest.fixture(params=["documented", "pgqueue grant"])
def runtime_dsn(request: pytest.FixtureRequest, dsn: str, table: str, raw: Raw) -> Iterator[str]:
    """A login role with the documented grants on an installed queue (typed in
    by hand, or given by ``pgqueue grant ROLE``), and its DSN."""
    with pgqueue.Queue(dsn, table=table) as owner:
        owner.install()
    role = f"pgqueue_rt_{uuid.uuid4().hex[:8]}"
    names = {
        "role": sql.Identifier(role),
        "table": sql.Identifier(table),
        "sequence": sql.Identifier(f"{table}_id_seq"),
        "history": sql.Identifier(f"{table}_history"),
        "queues": sql.Identifier(f"{table}_queues"),
        "leases": sql.Identifier(f"{table}_unique_leases"),
        "schedules": sql.Identifier(f"{table}_schedules"),
        "results": sql.Identifier(f"{table}_results"),
        "limits": sql.Identifier(f"{table}_limits"),
        "slots": sql.Identifier(f"{table}_limit_slots"),
        "dependencies": sql.Identifier(f"{table}_dependencies"),
    }
    raw.conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(names["role"]))
    if request.param == "documented":
        for grant in (*GRANTS, HISTORY_GRANT):
            raw.conn.execute(sql.SQL(grant).format(**names))
    else:
        pgqueue_command("grant", role, "--dsn", dsn, "--table", table)
    try:
        yield make_conninfo(dsn, user=role)
    finally:
        raw.conn.execute(sql.SQL("DROP OWNED BY {role}").format(**names))
        raw.conn.execute(sql.SQL("DROP ROLE {role}").format(**names))


def pgqueue_command(*args: str) -> str:
    """Run the ``pgqueue`` command of this interpreter; its output, once it succeeded."""
    done = subprocess.run([sys.executable, "-m", "pgqueue", *args], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_read_only_role_reads_the_queue_and_changes_nothing(
    dsn: str, table: str, raw: Raw
) -> None:
    with pgqueue.Queue(dsn, table=table, history=True) as owner:
        owner.install()
        job_id = owner.enqueue("k", {"n": 1})
    role = f"pgqueue_ro_{uuid.uuid4().hex[:8]}"
    raw.conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        printed = pgqueue_command("grant", role, "--read-only", "--dsn", dsn, "--table", table)
        assert "GRANT SELECT ON" in printed and "INSERT" not in printed
        with pgqueue.Queue(make_conninfo(dsn, user=role), table=table) as reader:
            assert reader.get(job_id) is not None
            assert reader.stats().by_status[pgqueue.JobStatus.PENDING] == 1
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                reader.enqueue("k")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                reader.claim(1)
        assert raw.rows("SELECT id, status FROM {table}") == [(job_id, "pending")]
    finally:
        raw.conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        raw.conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_grant_refuses_bad_input_before_anything_is_written(dsn: str, table: str) -> None:
    with pgqueue.Queue(dsn, table=table) as q:
        with pytest.raises(ValueError, match="invalid role name"):
            q.grant("")
        with pytest.raises(TypeError, match="read_only must be a bool"):
            q.grant("app", read_only="yes")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="not installed"):
            q.grant("app")


def fails(_: pgqueue.Job) -> None:
    raise RuntimeError("this job always fails")


async def test_runtime_role_with_only_the_documented_grants_runs_the_whole_queue(
    runtime_dsn: str, table: str, raw: Raw, backend: str
) -> None:
    with psycopg.connect(runtime_dsn, autocommit=True) as conn:
        # Neither superuser nor owner, and no right to create anything.
        [(superuser, owner, create)] = conn.execute(
            "SELECT rolsuper,"
            " pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = %s::regclass),"
            "             'MEMBER'),"
            " has_schema_privilege('public', 'CREATE')"
            " FROM pg_roles WHERE rolname = current_user",
            (table,),
        ).fetchall()
    assert (superuser, owner, create) == (False, False, False)

    async with open_queue(backend, runtime_dsn, table=table) as q:
        # The runtime role cannot run DDL, install() included.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await q.install()

        one = await q.enqueue("ok", {"n": 0})
        small = await q.enqueue_many([("ok", {"n": i}) for i in range(1, 6)])
        copied = await q.enqueue_many([("ok", {"n": i}) for i in range(6, 306)])  # COPY
        doomed = await q.enqueue("fails", max_attempts=1)
        assert len({one, *small, *copied, doomed}) == 307

        # A serving worker: LISTEN, claims, completions, a failure, the reaper.
        worker = WorkerUnderTest(
            backend,
            q,
            {"ok": lambda job: None, "fails": fails},
            concurrency=4,
            poll_interval=0.2,
            visibility_timeout=timedelta(seconds=2),
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            with anyio.fail_after(120):
                # The database is polled: no event tells when the rows change.
                while raw.count() > 1 or raw.count("status = 'dead'") != 1:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            worker.stop()
        assert raw.rows("SELECT id, status FROM {table}") == [(doomed, "dead")]

        # The operator's calls.
        assert await q.retry([doomed]) == 1
        [job] = await q.claim(1, worker="by-hand")
        assert job.id == doomed
        # A heartbeat, as a worker sends for a job that runs for a while.
        assert (await q._heartbeat([doomed], worker="by-hand")).held == [doomed]
        assert await q.fail(job, "again") is pgqueue.JobStatus.DEAD
        assert await q.retry(doomed) == 1
        [job] = await q.claim(1, worker="by-hand")
        assert await q.reap(timedelta(microseconds=1)) == []  # its last attempt: buried
        assert (await q.get(doomed)).status is pgqueue.JobStatus.DEAD
        stats = await q.stats()
        assert stats.by_status.get(pgqueue.JobStatus.DEAD) == 1
        assert await q.complete(job) == 0  # not running any more: nothing to delete

    # And the role really is limited: no DDL on the queue's table.
    with psycopg.connect(runtime_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(table + "_x")))


async def test_runtime_role_keeps_history_with_the_documented_extra_grant(
    runtime_dsn: str, table: str, raw: Raw, backend: str
) -> None:
    async with open_queue(backend, runtime_dsn, table=table, history=True) as q:
        kept = await q.enqueue("ok")
        buried = await q.enqueue("fails", max_attempts=1)
        jobs = {job.id: job for job in await q.claim(2, worker="by-hand")}
        assert await q.complete(jobs[kept]) == 1
        assert await q.fail(jobs[buried], "no") is pgqueue.JobStatus.DEAD
        assert await q.purge_dead(timedelta(0)) == 1
        assert await q.prune_history(timedelta(days=1)) == 0  # too recent to go
        assert await q.prune_history(timedelta(microseconds=1)) == 2
    assert raw.count() == 0
