"""Schema migrations: from nothing, from a hand-built queue table, and refusals."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue import JobSpec, JobStatus
from pgqueue.bench_sql import SeedStatements
from pgqueue.core import migrations
from pgqueue.core.migrations import AUTOVACUUM_SETTINGS, FILLFACTOR, LATEST_VERSION, MIGRATIONS
from pgqueue.core.ops import QueueCore
from pgqueue.core.sql import UNIQUE_PREDICATES
from pgqueue.sync.driver import run_on

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


def running_index(raw: Raw, table: str) -> int | None:
    """The oid of the reaper's index (migration 6), or None."""
    oid: int | None = raw.one("SELECT to_regclass(%s)::oid", f"{table}_running")
    return oid


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
    assert set(options) == {f"{k}={v}" for k, v in AUTOVACUUM_SETTINGS.items()} | {
        f"fillfactor={FILLFACTOR}"
    }
    assert history_exists(raw, table)
    assert running_index(raw, table) is not None
    # No older release ever used a table this install created: what the
    # migrations replaced went at once, and no contract step is pending.
    assert raw.one("SELECT to_regclass(%s)", f"{table}_ready") is None
    assert raw.one("SELECT to_regclass(%s)", f"{table}_claim") is None
    contracted = raw.rows(
        "SELECT version FROM pgqueue_schema WHERE queue_table = %s AND NOT contract_pending"
        " AND contracted_at IS NOT NULL ORDER BY version",
        table,
    )
    assert contracted == [(7,), (8,)]
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
        # The table's own workers may still claim through its ready index:
        # it stays until the contract step.
        assert raw.one("SELECT to_regclass(%s)", f"{table}_ready") is not None
        assert list(await q.pending_contract()) == [7, 8]

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


async def test_a_record_kept_by_a_release_before_expand_and_contract_has_nothing_pending(
    empty_database: str, table: str, backend: str
) -> None:
    async with open_queue(backend, empty_database, table=table) as q:
        await q.install()
    # pgqueue_schema as the releases before expand and contract kept it: their
    # migrations dropped what they replaced at once.
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE pgqueue_schema DROP COLUMN contract_pending, DROP COLUMN contracted_at"
        )
        async with open_queue(backend, empty_database, table=table) as q:
            assert await q.pending_contract() == {}
            assert await q.install() == []
            assert await q.pending_contract() == {}
            assert await q.contract() == []
        columns = conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'pgqueue_schema'::regclass"
            " AND attname LIKE 'contract%' AND NOT attisdropped ORDER BY 1"
        ).fetchall()
        assert columns == [("contract_pending",), ("contracted_at",)]
        # An older release records a migration as it always did: nothing pending.
        conn.execute(
            "INSERT INTO pgqueue_schema (queue_table, version, description) VALUES ('x', 1, 'old')"
        )
        pending = conn.execute(
            "SELECT contract_pending FROM pgqueue_schema WHERE queue_table = 'x'"
        )
        assert pending.fetchall() == [(False,)]


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


# -- migration 6: the reaper's index ----------------------------------------------


def back_to_version_5(raw: Raw, table: str) -> None:
    """Make an installed table what pgqueue before migration 6 left."""
    raw.rows(f"DROP INDEX {table}_running")
    raw.rows("DELETE FROM pgqueue_schema WHERE queue_table = %s AND version > 5", table)


async def test_a_table_at_version_5_gains_the_running_index_in_place(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        stale, _fresh, _waiting = await q.enqueue_many([("a", 1), ("a", 2), ("a", 3)])
        await q.claim(2, worker="w")
        back_to_version_5(raw, table)
        raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour' WHERE id = %s", stale)
        rows = raw.rows("SELECT * FROM {table} ORDER BY id")

        assert await q.install() == ALL_VERSIONS[5:]
        assert await q.schema_version() == LATEST_VERSION
        assert raw.rows("SELECT * FROM {table} ORDER BY id") == rows
        assert running_index(raw, table) is not None
        assert await q.reap(timedelta(minutes=5)) == [stale]


async def test_a_running_index_built_concurrently_beforehand_is_kept(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    # What docs/migrations.md tells the operator of a big table to do.
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        back_to_version_5(raw, table)
        raw.rows(
            f"CREATE INDEX CONCURRENTLY {table}_running ON {{table}} (locked_at)"
            " WHERE status = 'running' AND locked_at IS NOT NULL"
        )
        built = running_index(raw, table)

        assert await q.install() == ALL_VERSIONS[5:]
        assert running_index(raw, table) == built


async def test_a_running_index_built_otherwise_is_refused(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    # Without "locked_at IS NOT NULL" the planner would read it for every
    # statement that finds running jobs by id.
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        back_to_version_5(raw, table)
        raw.rows(f"CREATE INDEX {table}_running ON {{table}} (locked_at) WHERE status = 'running'")

        with pytest.raises(pgqueue.SchemaError, match="not the one pgqueue needs"):
            await q.install()
        assert await q.schema_version() == 5


async def test_an_invalid_running_index_is_refused_until_it_is_dropped(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        await q.enqueue_many([("a", 1), ("a", 2)])
        await q.claim(2)
        back_to_version_5(raw, table)
        # A concurrent build that fails leaves an invalid index behind.
        with pytest.raises(psycopg.errors.UniqueViolation):
            raw.rows(
                f"CREATE UNIQUE INDEX CONCURRENTLY {table}_running ON {{table}} (kind)"
                " WHERE status = 'running'"
            )

        with pytest.raises(pgqueue.SchemaError, match="invalid"):
            await q.install()
        assert await q.schema_version() == 5
        raw.rows(f"DROP INDEX {table}_running")
        assert await q.install() == ALL_VERSIONS[5:]
        assert raw.one(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = %s::regclass", f"{table}_running"
        )


async def test_another_relation_named_like_the_running_index_is_refused(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    raw.rows(f"CREATE TABLE {table}_running (x int)")
    try:
        async with open_queue(backend, dsn, table=table) as q:
            with pytest.raises(pgqueue.SchemaError, match="not an index"):
                await q.install()
            assert await q.schema_version() is None
    finally:
        raw.rows(f"DROP TABLE {table}_running")


# -- migration 7: queues, priorities, unique jobs, schedules ------------------------

# The columns a table had before migration 7, in the order they are compared.
V6_COLUMNS = (
    "id, kind, payload, run_at, attempts, max_attempts, status, locked_at, locked_by,"
    " last_error, created_at"
)
CLAIM_INDEX = "(queue, priority, run_at, id) WHERE status = 'pending'"


def install_version_6(raw: Raw, table: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Install the table as the pgqueue before migration 7 did: migrations 1 to 6 only."""
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:6])
        assert run_on(raw.conn, QueueCore(table).install()) == ALL_VERSIONS[:6]


def index_oid(raw: Raw, name: str) -> int | None:
    oid: int | None = raw.one("SELECT to_regclass(%s)::oid", name)
    return oid


def filenode(raw: Raw, relation: str) -> int:
    """The file that holds a table's rows: a rewrite gives it a new one."""
    return int(raw.one("SELECT pg_relation_filenode(%s::regclass)", relation))


async def test_a_table_at_version_6_with_jobs_upgrades_to_7_in_place(
    dsn: str, table: str, backend: str, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_version_6(raw, table, monkeypatch)
    # Rows as pgqueue 6 wrote them, in every state a job can be in.
    raw.rows(
        """
INSERT INTO {table} (kind, payload, status, attempts, locked_at, locked_by, last_error, run_at)
VALUES ('mail', jsonb_build_object('n', 1), 'pending', 0, NULL, NULL, NULL, now()),
       ('mail', jsonb_build_object('n', 2), 'pending', 1, NULL, NULL, 'boom',
        now() - interval '1 hour'),
       ('mail', jsonb_build_object('n', 3), 'running', 1, now() - interval '1 hour',
        'old-worker', NULL, now()),
       ('mail', jsonb_build_object('n', 4), 'dead', 3, NULL, NULL, 'gave up', now()),
       ('mail', jsonb_build_object('n', 5), 'pending', 0, NULL, NULL, NULL,
        now() + interval '1 day')"""
    )
    raw.rows(
        f"INSERT INTO {table}_history (id, kind, payload, attempts, max_attempts, outcome,"
        " created_at) VALUES (1000, 'mail', 'null', 1, 3, 'succeeded', now())"
    )
    ids = {r[1]["n"]: r[0] for r in raw.rows("SELECT id, payload FROM {table}")}
    before = raw.rows(f"SELECT {V6_COLUMNS} FROM {{table}} ORDER BY id")
    files = (filenode(raw, table), filenode(raw, f"{table}_history"))
    assert index_oid(raw, f"{table}_ready") is not None

    handled: list[int] = []
    async with open_queue(backend, dsn, table=table) as q:
        assert await q.schema_version() == 6
        assert await q.install() == ALL_VERSIONS[6:]
        assert await q.schema_version() == LATEST_VERSION

        # In place: no row rewritten (constant defaults), none lost or changed.
        assert (filenode(raw, table), filenode(raw, f"{table}_history")) == files
        assert raw.rows(f"SELECT {V6_COLUMNS} FROM {{table}} ORDER BY id") == before
        assert raw.rows("SELECT DISTINCT queue, priority, unique_key FROM {table}") == [
            ("default", 0, None)
        ]
        assert raw.rows(f"SELECT queue, priority FROM {table}_history") == [("default", 0)]
        # The claim index is to take the ready index's place (7), and the
        # claim index of jobs without a limit its place (8); but the ready
        # index stays, for the old workers still running, until the
        # operator contracts the schema.
        assert index_oid(raw, f"{table}_ready") is not None
        assert index_oid(raw, f"{table}_claim") is not None
        assert index_oid(raw, f"{table}_unlimited") is not None
        assert list(await q.pending_contract()) == [7, 8]

        job = await q.get(ids[2])
        assert job is not None
        assert (job.status, job.attempts, job.last_error) == (JobStatus.PENDING, 1, "boom")
        assert (job.queue, job.priority, job.unique_key) == ("default", 0, None)
        # The old worker's job comes back through its lease; the dead one by a retry.
        assert await q.reap(timedelta(minutes=5)) == [ids[3]]
        assert await q.retry([ids[4]]) == 1

        def handle(job: pgqueue.Job) -> None:
            handled.append(job.payload["n"])

        worker = WorkerUnderTest(backend, q, {"mail": handle}, queues=["default"])
        await worker.run(until_empty=True)

        assert sorted(handled) == [1, 2, 3, 4]
        # Every process runs this version now: what they replaced goes.
        assert await q.contract() == [7, 8]
        assert index_oid(raw, f"{table}_ready") is None
        assert index_oid(raw, f"{table}_claim") is None
        assert await q.pending_contract() == {}
        assert await q.contract() == []

    # The job due tomorrow waits, in the default queue.
    assert raw.rows("SELECT id, status, queue FROM {table}") == [(ids[5], "pending", "default")]


# The indexes of migration 7 an operator may build beforehand, by their name's suffix.
PREBUILT_INDEXES = ("claim", "unique_queued", "unique_active")


def add_version_7_columns(raw: Raw) -> None:
    """What docs/migrations.md has the operator of a big table run first: instant."""
    raw.rows(
        "ALTER TABLE {table} ADD COLUMN queue text NOT NULL DEFAULT 'default',"
        " ADD COLUMN priority smallint NOT NULL DEFAULT 0,"
        " ADD COLUMN unique_key text, ADD COLUMN unique_scope text"
    )


async def test_claim_and_unique_indexes_built_concurrently_beforehand_are_kept(
    dsn: str, table: str, backend: str, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_version_6(raw, table, monkeypatch)
    raw.rows("INSERT INTO {table} (kind) SELECT 'a' FROM generate_series(1, 3)")
    add_version_7_columns(raw)
    # The statements of docs/migrations.md, with the table's name.
    raw.rows(f"CREATE INDEX CONCURRENTLY {table}_claim ON {{table}} {CLAIM_INDEX}")
    for scope, predicate in UNIQUE_PREDICATES.items():
        raw.rows(
            f"CREATE UNIQUE INDEX CONCURRENTLY {table}_unique_{scope} ON {{table}} (unique_key)"
            f" WHERE {predicate}"
        )
    built = [index_oid(raw, f"{table}_{name}") for name in PREBUILT_INDEXES]

    async with open_queue(backend, dsn, table=table) as q:
        with monkeypatch.context() as patch:
            patch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:7])
            assert await q.install() == [7]
        assert [index_oid(raw, f"{table}_{name}") for name in PREBUILT_INDEXES] == built
        assert await q.install() == ALL_VERSIONS[7:]
        first = await q.enqueue("a", unique_key="k", priority=5)
        assert await q.enqueue("a", unique_key="k") == first
        [job] = await q.claim(1)
        assert job.id == first


async def test_a_claim_index_built_otherwise_is_refused(
    dsn: str, table: str, backend: str, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_version_6(raw, table, monkeypatch)
    add_version_7_columns(raw)
    # Without priority, a claim could not read the priorities from the index.
    raw.rows(
        f"CREATE INDEX {table}_claim ON {{table}} (queue, run_at, id) WHERE status = 'pending'"
    )
    async with open_queue(backend, dsn, table=table) as q:
        with pytest.raises(pgqueue.SchemaError, match="not the one pgqueue needs") as caught:
            await q.install()
        assert "btree (queue, priority, run_at, id)" in str(caught.value)
        assert await q.schema_version() == 6
    assert index_oid(raw, f"{table}_ready") is not None  # nothing changed


async def test_an_invalid_claim_index_is_refused_until_it_is_dropped(
    dsn: str, table: str, backend: str, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_version_6(raw, table, monkeypatch)
    raw.rows("INSERT INTO {table} (kind) VALUES ('a'), ('a')")
    add_version_7_columns(raw)
    # A concurrent build that fails leaves an invalid index behind.
    with pytest.raises(psycopg.errors.UniqueViolation):
        raw.rows(f"CREATE UNIQUE INDEX CONCURRENTLY {table}_claim ON {{table}} (kind)")

    async with open_queue(backend, dsn, table=table) as q:
        with pytest.raises(pgqueue.SchemaError, match="invalid"):
            await q.install()
        assert await q.schema_version() == 6
        raw.rows(f"DROP INDEX {table}_claim")
        assert await q.install() == ALL_VERSIONS[6:]
        assert len(await q.claim(5)) == 2


@pytest.mark.parametrize("flaw", ["invalid", "not partial"])
async def test_a_unique_index_built_beforehand_that_would_not_do_is_refused(
    dsn: str, table: str, backend: str, raw: Raw, monkeypatch: pytest.MonkeyPatch, flaw: str
) -> None:
    # Either would break unique jobs: an invalid index is no arbiter for
    # ON CONFLICT (every enqueue with a unique_key fails), one without the
    # predicate holds a key for ever, over every scope.
    install_version_6(raw, table, monkeypatch)
    add_version_7_columns(raw)
    name = f"{table}_unique_queued"
    if flaw == "invalid":
        raw.rows("INSERT INTO {table} (kind, unique_key, unique_scope)"
                 " VALUES ('a', 'k', 'queued'), ('a', 'k', 'queued')")  # fmt: skip
        predicate = UNIQUE_PREDICATES["queued"]
        with pytest.raises(psycopg.errors.UniqueViolation):
            raw.rows(
                f"CREATE UNIQUE INDEX CONCURRENTLY {name} ON {{table}} (unique_key)"
                f" WHERE {predicate}"
            )
        raw.rows("DELETE FROM {table}")
    else:
        raw.rows(f"CREATE UNIQUE INDEX {name} ON {{table}} (unique_key)")

    async with open_queue(backend, dsn, table=table) as q:
        with pytest.raises(pgqueue.SchemaError, match=name):
            await q.install()
        assert await q.schema_version() == 6


def add_version_8_columns(raw: Raw) -> None:
    """What docs/migrations.md has the operator of a big table run first: instant."""
    raw.rows(
        "ALTER TABLE {table} ADD COLUMN cancel_requested_at timestamptz,"
        " ADD COLUMN result_ttl interval, ADD COLUMN limit_key text"
    )


async def test_the_indexes_of_migration_8_built_concurrently_beforehand_are_kept(
    dsn: str, table: str, backend: str, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:7])
        assert run_on(raw.conn, QueueCore(table).install()) == ALL_VERSIONS[:7]
    raw.rows("INSERT INTO {table} (kind) SELECT 'a' FROM generate_series(1, 3)")
    add_version_8_columns(raw)
    # The statements of docs/migrations.md, with the table's name.
    raw.rows(
        f"CREATE INDEX CONCURRENTLY {table}_unlimited ON {{table}} (queue, priority, run_at, id)"
        " WHERE status = 'pending' AND limit_key IS NULL"
    )
    raw.rows(
        f"CREATE INDEX CONCURRENTLY {table}_limited ON {{table}}"
        " (limit_key, priority DESC, run_at, id) WHERE status = 'pending' AND limit_key IS NOT NULL"
    )
    built = [index_oid(raw, f"{table}_{name}") for name in ("unlimited", "limited")]
    assert None not in built

    async with open_queue(backend, dsn, table=table) as q:
        assert await q.install() == ALL_VERSIONS[7:]
        assert [index_oid(raw, f"{table}_{name}") for name in ("unlimited", "limited")] == built
        assert len(await q.claim(5)) == 3
        # The claim index it replaces stays for the old workers, until the contract step.
        assert index_oid(raw, f"{table}_claim") is not None
        assert await q.contract() == [8]
        assert index_oid(raw, f"{table}_claim") is None


async def test_an_unlimited_index_built_otherwise_is_refused(
    dsn: str, table: str, backend: str, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:7])
        run_on(raw.conn, QueueCore(table).install())
    add_version_8_columns(raw)
    # Without the limit_key predicate, claims would read past limited jobs.
    raw.rows(
        f"CREATE INDEX {table}_unlimited ON {{table}} (queue, priority, run_at, id)"
        " WHERE status = 'pending'"
    )
    async with open_queue(backend, dsn, table=table) as q:
        with pytest.raises(pgqueue.SchemaError, match="not the one pgqueue needs"):
            await q.install()
        assert await q.schema_version() == 7
    assert index_oid(raw, f"{table}_claim") is not None  # nothing changed


# -- migration 9: the trace context ----------------------------------------------


async def test_a_table_at_version_8_with_jobs_gains_the_trace_context_in_place(
    dsn: str, table: str, backend: str, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:8])
        assert run_on(raw.conn, QueueCore(table).install()) == ALL_VERSIONS[:8]
    # Rows as pgqueue 8 wrote them: waiting, running (its worker gone), dead.
    raw.rows(
        """
INSERT INTO {table} (kind, payload, status, attempts, locked_at, locked_by, last_error)
VALUES ('mail', '1', 'pending', 0, NULL, NULL, NULL),
       ('mail', '2', 'running', 1, now() - interval '1 hour', 'old-worker', NULL),
       ('mail', '3', 'dead', 3, NULL, NULL, 'gave up')"""
    )
    ids = {r[1]: r[0] for r in raw.rows("SELECT id, payload FROM {table}")}
    before = raw.rows("SELECT * FROM {table} ORDER BY id")
    file = filenode(raw, table)

    handled: list[tuple[int, str | None]] = []
    async with open_queue(backend, dsn, table=table) as q:
        assert await q.schema_version() == 8
        assert await q.install() == ALL_VERSIONS[8:]
        assert await q.schema_version() == LATEST_VERSION
        # In place: no row rewritten, each one as it was, with no trace context
        # (nor any column of the later migrations: NULL, no default).
        assert filenode(raw, table) == file
        after = raw.rows("SELECT * FROM {table} ORDER BY id")
        added = len(after[0]) - len(before[0])
        assert added >= 1
        assert after == [(*r, *[None] * added) for r in before]

        assert await q.reap(timedelta(minutes=5)) == [ids[2]]
        assert await q.retry([ids[3]]) == 1

        def handle(job: pgqueue.Job) -> None:
            handled.append((job.payload, job.trace_context))

        await WorkerUnderTest(backend, q, {"mail": handle}).run(until_empty=True)

    assert sorted(handled) == [(1, None), (2, None), (3, None)]
    assert raw.count() == 0


# -- history --------------------------------------------------------------------


def history_rows(raw: Raw, table: str) -> list[tuple[Any, ...]]:
    return raw.rows(
        f"SELECT id, kind, payload, attempts, outcome, queue, priority FROM {table}_history"
        " ORDER BY id"
    )


async def test_with_history_each_success_is_copied_by_the_statement_that_deletes_it(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table, history=True) as q:
        await q.install()
        ids = await q.enqueue_many([("mail", {"n": n}) for n in range(30)])
        urgent = await q.enqueue("mail", {"n": 30}, queue="urgent", priority=-7)
        # A worker's one-statement turns, and the public complete().
        await WorkerUnderTest(backend, q, {"mail": lambda job: None}).run(until_empty=True)
        last = await q.enqueue("sms", {"n": 99}, queue="texts", priority=100)
        [job] = await q.claim(1)
        assert await q.complete(job) == 1

    assert raw.count() == 0
    assert history_rows(raw, table) == [
        *((i, "mail", {"n": n}, 1, "succeeded", "default", 0) for n, i in enumerate(ids)),
        (urgent, "mail", {"n": 30}, 1, "succeeded", "urgent", -7),
        (last, "sms", {"n": 99}, 1, "succeeded", "texts", 100),
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
        job_id = await q.enqueue("mail", {"n": 1}, max_attempts=1, queue="bulk", priority=-3)
        [job] = await q.claim(1)
        assert await q.fail(job, "gave up") is JobStatus.DEAD
        raw.rows("UPDATE {table} SET run_at = now() - interval '2 days'")
        assert await q.purge_dead(timedelta(days=1)) == 1

    assert raw.count() == 0
    assert history_rows(raw, table) == [(job_id, "mail", {"n": 1}, 1, "dead", "bulk", -3)]
    assert raw.one(f"SELECT last_error FROM {table}_history") == "gave up"


async def test_a_table_at_version_9_keeps_its_limits_and_gains_rates_in_place(
    dsn: str, table: str, backend: str, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_queue(backend, dsn, table=table) as q:
        with monkeypatch.context() as patch:
            patch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:9])
            assert await q.install() == ALL_VERSIONS[:9]
        await q.set_limit("api", 3)
        held = await q.enqueue("k", limit_key="api")
        assert await q.install() == ALL_VERSIONS[9:]
        assert [j.id for j in await q.claim(5)] == [held]
        assert await q.limits() == [pgqueue.LimitState("api", 3, 1, 0, True)]
        await q.set_rate("api", 0.001, burst=1)
        more = await q.enqueue_many([JobSpec("k", limit_key="api") for _ in range(2)])
        assert [j.id for j in await q.claim(5)] == more[:1]
        assert await q.claim(5) == []


async def test_an_upgrade_grants_the_new_tables_to_the_roles_of_the_queue_table(
    dsn: str, table: str, backend: str, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An application whose runtime role the owner granted the queue table
    # only (docs/reliability.md, "Least privilege", before migration 7): its
    # workers must keep claiming after the upgrade, which reads and writes
    # the new tables.
    install_version_6(raw, table, monkeypatch)
    role = f"pgqueue_app_{uuid.uuid4().hex[:8]}"
    names = {
        "role": sql.Identifier(role),
        "table": sql.Identifier(table),
        "sequence": sql.Identifier(f"{table}_id_seq"),
    }
    for statement in (
        "CREATE ROLE {role} LOGIN",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {role}",
        "GRANT USAGE ON SEQUENCE {sequence} TO {role}",
    ):
        raw.conn.execute(sql.SQL(statement).format(**names))
    try:
        async with open_queue(backend, dsn, table=table) as owner:
            assert await owner.install() == ALL_VERSIONS[6:]
        async with open_queue(backend, make_conninfo(dsn, user=role), table=table) as q:
            job = await q.enqueue("k", unique_key="once", unique_for=timedelta(hours=1))
            await q.pause_queue("other")
            [claimed] = await q.claim(5)
            assert claimed.id == job
            assert await q.reap(timedelta(minutes=5)) == []  # prunes the leases and results
            assert await q.schedules() == []
            # Migration 8's tables: results, limits and their slots.
            kept = await q.enqueue("k", result_ttl=timedelta(hours=1), limit_key="api")
            await q.set_limit("api", 2)
            [limited] = await q.claim(5)
            assert limited.id == kept
            assert await q.complete(limited) == 1
            result = await q.result(kept)
            assert result is not None and result.outcome == "succeeded"
            assert [(s.key, s.running) for s in await q.limits()] == [("api", 0)]
            assert (await q.cancel(await q.enqueue("k"))).deleted
            # Migration 10's rates, in the limits table.
            await q.set_rate("api", 5.0)
            again = await q.enqueue("k", limit_key="api")
            assert [j.id for j in await q.claim(5)] == [again]
            [state] = await q.limits()
            assert (state.per_second, state.burst) == (5.0, 5)
    finally:
        raw.conn.execute(sql.SQL("DROP OWNED BY {role}").format(**names))
        raw.conn.execute(sql.SQL("DROP ROLE {role}").format(**names))


# -- migration 11: the dead jobs' index ----------------------------------------------


def dead_index(raw: Raw, table: str) -> int | None:
    """The oid of the dead jobs' index (migration 11), or None."""
    oid: int | None = raw.one("SELECT to_regclass(%s)::oid", f"{table}_dead")
    return oid


async def test_a_table_at_version_10_gains_the_dead_index_in_place(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        job_id = await q.enqueue("a", max_attempts=1)
        [job] = await q.claim(1, worker="w")
        await q.fail(job, "boom")
        raw.rows(f"DROP INDEX {table}_dead")
        raw.rows("DELETE FROM pgqueue_schema WHERE queue_table = %s AND version > 10", table)
        rows = raw.rows("SELECT * FROM {table} ORDER BY id")

        assert await q.install() == ALL_VERSIONS[10:]
        assert raw.rows("SELECT * FROM {table} ORDER BY id") == rows
        assert dead_index(raw, table) is not None
        raw.rows("SET enable_seqscan = off")
        plan = raw.rows("EXPLAIN SELECT id FROM {table} WHERE status = 'dead' ORDER BY id")
        assert f"{table}_dead" in str(plan)
        assert await q.retry([job_id]) == 1


async def test_a_dead_index_built_concurrently_beforehand_is_kept(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        raw.rows(f"DROP INDEX {table}_dead")
        raw.rows("DELETE FROM pgqueue_schema WHERE queue_table = %s AND version > 10", table)
        raw.rows(f"CREATE INDEX CONCURRENTLY {table}_dead ON {{table}} (id) WHERE status = 'dead'")
        built = dead_index(raw, table)

        assert await q.install() == ALL_VERSIONS[10:]
        assert dead_index(raw, table) == built


# -- migration 12: room on each page for the claim's update -------------------------


def pages(raw: Raw, ids: list[int]) -> list[int]:
    """The heap page of each job's current version, in the order of ``ids``."""
    rows = dict(raw.rows("SELECT id, (ctid::text::point)[0]::int FROM {table}"))
    return [rows[i] for i in ids]


async def test_a_table_at_version_11_gains_the_fillfactor_in_place(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        await q.enqueue_many([("a", {"n": n}) for n in range(10)])
        raw.rows("ALTER TABLE {table} RESET (fillfactor)")
        raw.rows("DELETE FROM pgqueue_schema WHERE queue_table = %s AND version > 11", table)
        rows = raw.rows("SELECT * FROM {table} ORDER BY id")
        file = filenode(raw, table)

        assert await q.install() == ALL_VERSIONS[11:]
        assert filenode(raw, table) == file  # no rewrite
        assert raw.rows("SELECT * FROM {table} ORDER BY id") == rows
        options = raw.one("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", table)
        assert f"fillfactor={FILLFACTOR}" in options


async def test_a_claimed_job_stays_on_its_heap_page(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    # Room left by the fillfactor takes the claim's new version of each
    # row, so that the WAL carries only what the claim changed.
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        ids = await q.enqueue_many([("a", {"n": n}) for n in range(500)])
        before = pages(raw, ids)
        assert len(set(before)) > 1  # several pages, each filled to the fillfactor
        claimed = await q.claim(500, worker="a-long-worker-name:123456:abcdef")
        assert sorted(job.id for job in claimed) == ids
        assert pages(raw, ids) == before
