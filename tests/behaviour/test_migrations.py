"""Schema migrations: from nothing, from a hand-built queue table, and refusals."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import JobStatus
from pgqueue.core.migrations import AUTOVACUUM_SETTINGS, LATEST_VERSION, MIGRATIONS
from pgqueue.core.sql import SeedStatements

from ..backends import WorkerUnderTest, open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio

ALL_VERSIONS = [m.version for m in MIGRATIONS]


def recorded_versions(raw: Raw, table: str) -> list[int]:
    if raw.one("SELECT to_regclass('pgqueue_schema')") is None:
        return []
    rows = raw.rows(
        "SELECT version FROM pgqueue_schema WHERE queue_table = %s ORDER BY version", table
    )
    return [r[0] for r in rows]


def history_exists(raw: Raw, table: str) -> bool:
    return raw.one("SELECT to_regclass(%s)", f"{table}_history") is not None


async def test_install_on_an_empty_database_applies_every_migration_once(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table) as q:
        assert await q.schema_version() is None
        assert await q.install() == ALL_VERSIONS
        assert await q.install() == []
        assert await q.schema_version() == LATEST_VERSION

    assert recorded_versions(raw, table) == ALL_VERSIONS
    options = raw.one("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", table)
    assert set(options) == {f"{k}={v}" for k, v in AUTOVACUUM_SETTINGS.items()}
    assert history_exists(raw, table)
    with pytest.raises(psycopg.errors.CheckViolation):
        raw.rows("INSERT INTO {table} (kind, status) VALUES ('a', 'done')")


async def test_a_hand_built_queue_table_is_adopted_and_its_rows_keep_their_meaning(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    # The well-known design's DDL, rows in every status, then pgqueue takes over.
    for statement in SeedStatements(table).create:
        raw.conn.execute(statement)
    raw.rows(
        """
INSERT INTO {table} (kind, payload, status, attempts, locked_at, locked_by, last_error, run_at)
VALUES ('mail', jsonb_build_object('n', 1), 'pending', 0, NULL, NULL, NULL, now()),
       ('mail', jsonb_build_object('n', 2), 'pending', 1, NULL, NULL, 'boom',
        now() - interval '1 hour'),
       ('mail', jsonb_build_object('n', 3), 'running', 1, now() - interval '1 hour',
        'old-worker', NULL, now()),
       ('mail', jsonb_build_object('n', 4), 'dead', 3, NULL, NULL, 'gave up', now())"""
    )
    ids = {r[1]["n"]: r[0] for r in raw.rows("SELECT id, payload FROM {table}")}

    handled: list[int] = []
    async with open_queue(backend, dsn, table=table) as q:
        assert await q.install() == ALL_VERSIONS
        assert raw.count() == 4  # nothing rewritten, nothing lost

        dead = await q.get(ids[4])
        assert dead is not None and dead.status is JobStatus.DEAD
        assert dead.last_error == "gave up"
        # The old worker's job comes back through the lease, like any other.
        assert await q.reap(timedelta(minutes=5)) == [ids[3]]
        assert await q.retry([ids[4]]) == 1

        def handle(job: pgqueue.Job) -> None:
            handled.append(job.payload["n"])

        await WorkerUnderTest(backend, q, {"mail": handle}).run(until_empty=True)

    assert sorted(handled) == [1, 2, 3, 4]
    assert raw.count() == 0
    assert recorded_versions(raw, table) == ALL_VERSIONS


async def test_adopting_a_table_whose_rows_break_the_rules_changes_nothing(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    for statement in SeedStatements(table).create:
        raw.conn.execute(statement)
    raw.rows("INSERT INTO {table} (kind, payload, status) VALUES ('a', '1', 'done')")

    async with open_queue(backend, dsn, table=table) as q:
        with pytest.raises(psycopg.errors.CheckViolation):
            await q.install()
        assert await q.schema_version() is None

    assert recorded_versions(raw, table) == []
    assert not history_exists(raw, table)
    assert raw.one("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", table) is None


async def test_a_table_that_is_not_a_queue_is_refused_with_the_columns_it_lacks(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    raw.rows("CREATE TABLE {table} (id bigserial PRIMARY KEY, kind text, payload json)")

    async with open_queue(backend, dsn, table=table) as q:
        with pytest.raises(pgqueue.IncompatibleTable) as caught:
            await q.install()

    message = str(caught.value)
    assert "payload jsonb (found: json)" in message
    assert "run_at timestamp with time zone (found: missing)" in message
    assert recorded_versions(raw, table) == []
    assert not history_exists(raw, table)


async def test_a_database_newer_than_the_library_is_refused(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        raw.rows(
            "INSERT INTO pgqueue_schema (queue_table, version, description)"
            " VALUES (%s, %s, 'from the future')",
            table,
            LATEST_VERSION + 1,
        )
        with pytest.raises(pgqueue.SchemaTooNew, match="upgrade pgqueue"):
            await q.install()
        assert await q.schema_version() == LATEST_VERSION + 1


async def test_an_interrupted_upgrade_resumes_from_the_recorded_version(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    # A database installed by an older pgqueue: only the first migrations.
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
    raw.rows(f"DROP TABLE {table}_history")
    raw.rows("ALTER TABLE {table} RESET (" + ", ".join(AUTOVACUUM_SETTINGS) + ")")
    raw.rows("DELETE FROM pgqueue_schema WHERE queue_table = %s AND version > 2", table)

    async with open_queue(backend, dsn, table=table) as q:
        assert await q.install() == ALL_VERSIONS[2:]
    assert history_exists(raw, table)
    assert raw.one("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", table)


# -- history --------------------------------------------------------------------


def history_rows(raw: Raw, table: str) -> list[tuple[Any, ...]]:
    return raw.rows(f"SELECT id, kind, payload, attempts, outcome FROM {table}_history ORDER BY id")


async def test_with_history_each_success_is_copied_by_the_statement_that_deletes_it(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table, history=True) as q:
        await q.install()
        ids = await q.enqueue_many([("mail", {"n": n}) for n in range(30)])
        # A worker's one-statement turns, and the public complete().
        await WorkerUnderTest(backend, q, {"mail": lambda job: None}).run(until_empty=True)
        last = await q.enqueue("sms", {"n": 99})
        [job] = await q.claim(1)
        assert await q.complete(job) == 1

    assert raw.count() == 0
    assert history_rows(raw, table) == [
        *((i, "mail", {"n": n}, 1, "succeeded") for n, i in enumerate(ids)),
        (last, "sms", {"n": 99}, 1, "succeeded"),
    ]


async def test_without_history_nothing_is_copied(
    queue: Any, table: str, backend: str, raw: Raw
) -> None:
    await queue.enqueue_many([("mail", n) for n in range(5)])
    await WorkerUnderTest(backend, queue, {"mail": lambda job: None}).run(until_empty=True)
    assert raw.count() == 0
    assert history_rows(raw, table) == []


async def test_prune_history_deletes_only_rows_older_than_asked(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table, history=True) as q:
        await q.install()
        ids = await q.enqueue_many([("mail", n) for n in range(4)])
        await q.complete(*await q.claim(4))
        raw.rows(
            f"UPDATE {table}_history SET finished_at = now() - interval '40 days'"
            " WHERE id = ANY(%s)",
            ids[:3],
        )
        with pytest.raises(ValueError, match="older_than"):
            await q.prune_history(timedelta(0))
        assert await q.prune_history(timedelta(days=30)) == 3
        assert await q.prune_history(timedelta(days=30)) == 0

    assert [r[0] for r in history_rows(raw, table)] == ids[3:]


async def test_with_history_purged_dead_jobs_are_copied_as_dead(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table, history=True) as q:
        await q.install()
        job_id = await q.enqueue("mail", {"n": 1}, max_attempts=1)
        [job] = await q.claim(1)
        assert await q.fail(job, "gave up") is JobStatus.DEAD
        raw.rows("UPDATE {table} SET run_at = now() - interval '2 days'")
        assert await q.purge_dead(timedelta(days=1)) == 1

    assert raw.count() == 0
    assert history_rows(raw, table) == [(job_id, "mail", {"n": 1}, 1, "dead")]
    assert raw.one(f"SELECT last_error FROM {table}_history") == "gave up"
