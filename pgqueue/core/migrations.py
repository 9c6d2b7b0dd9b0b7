"""The queue table's schema, as numbered migrations, and the plan that applies them.

Each migration is a plan (see `pgqueue.core.ops`) that brings a table from
the previous version to its own. `install_plan` takes a transaction-level
advisory lock, reads the version recorded in ``pgqueue_schema`` (a table in
the queue table's schema, one row per applied migration and queue table),
applies the missing migrations and records them, all in one transaction.

Expand, then contract: a migration's ``apply`` never removes what the
release before it uses (an index its claim reads), so that the workers of
both releases run side by side while a deploy rolls out. What a migration
makes obsolete is dropped by its ``contract`` step, which `contract_plan`
runs when the operator says every process runs the new release
(``pgqueue migrate --contract``); ``pgqueue_schema`` records which contract
steps are pending. In a table the install itself creates, no older release
ever ran: its contract steps run at once.

Every migration is also safe to run on a table that already has what it
adds. That is what lets ``install()`` adopt a queue table built by hand
with the well-known design (the same columns, a ``jobs_ready`` partial
index): migration 1 finds the table and checks its columns, the later
ones add what it lacks, and its rows keep their meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from psycopg import sql

from .plans import Plan, Query
from .schema.names import TableNames
from .schema.predicates import (
    CLAIM_INDEX,
    DEAD_INDEX,
    LIMITED_INDEX,
    ORPHANS_INDEX,
    READY_INDEX,
    RUNNING_INDEX,
    UNIQUE_INDEXES,
    UNLIMITED_INDEX,
    WAITING_INDEX,
    Index,
)

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "IncompatibleTable",
    "Migration",
    "SchemaError",
    "SchemaNames",
    "SchemaTooNew",
    "check_version",
    "contract_plan",
    "grant_plan",
    "install_plan",
    "pending_contract_plan",
    "uninstall_plan",
    "validate_role",
    "version_plan",
]


class SchemaError(Exception):
    """The database's schema for a queue table is not one this pgqueue can use."""


class SchemaTooNew(SchemaError):
    """The database has migrations this version of pgqueue does not know: upgrade pgqueue."""


class IncompatibleTable(SchemaError):
    """A table of the queue's name exists, but lacks a column a queue needs."""


# The identifiers of a queue table (`pgqueue.core.schema.names`), under
# the name the migrations knew them by.
SchemaNames = TableNames


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of the schema's history, in two halves: expand, then contract.

    ``apply`` (the expand half) only adds: columns, indexes, tables, wider
    checks. Whatever the new release no longer needs but the release before
    it still uses (an index its claim reads) stays, so that the workers of
    both run side by side during a rolling deploy. ``contract`` drops it,
    later, when the operator says every process runs the new release
    (``pgqueue migrate --contract``); ``drops`` says what it drops.
    """

    version: int
    description: str
    apply: Callable[[SchemaNames], Plan[None]]
    contract: Callable[[SchemaNames], Plan[None]] | None = None
    drops: str | None = None


# The columns a queue table must have, with their types, whoever built it.
REQUIRED_COLUMNS: Final[Mapping[str, str]] = {
    "id": "bigint",
    "kind": "text",
    "payload": "jsonb",
    "run_at": "timestamp with time zone",
    "attempts": "integer",
    "max_attempts": "integer",
    "status": "text",
    "locked_at": "timestamp with time zone",
    "locked_by": "text",
    "last_error": "text",
    "created_at": "timestamp with time zone",
}


def _table_and_ready_index(n: SchemaNames) -> Plan[None]:
    yield Query(
        n.render("""
CREATE TABLE IF NOT EXISTS {table} (
    id           bigserial PRIMARY KEY,
    kind         text NOT NULL,
    payload      jsonb NOT NULL DEFAULT 'null',
    run_at       timestamptz NOT NULL DEFAULT now(),
    attempts     integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    status       text NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'running', 'dead')),
    locked_at    timestamptz,
    locked_by    text,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now()
)""")
    )
    # The table may have been there already: make sure it is a queue's.
    columns = yield Query(
        b"""
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped""",
        (n.regclass,),
    )
    found: dict[str, str] = dict(columns)
    wrong = [
        f"{name} {kind} (found: {found.get(name, 'missing')})"
        for name, kind in REQUIRED_COLUMNS.items()
        if found.get(name) != kind
    ]
    if wrong:
        raise IncompatibleTable(
            f"table {n.table_name} exists but is not a job queue table; "
            f"these columns must be: {', '.join(wrong)}"
        )
    # The ready index: only rows a worker may claim, so it tracks the backlog.
    yield Query(READY_INDEX.create(n))


# What each column's CHECK must allow; a table built by hand has none.
_CHECKS: Final[Mapping[str, str]] = {
    "attempts": "attempts >= 0",
    "max_attempts": "max_attempts >= 1",
    "status": "status IN ('pending', 'running', 'dead')",
}


def _constraints(n: SchemaNames) -> Plan[None]:
    # enqueue() without a payload stores JSON null.
    yield Query(n.render("ALTER TABLE {table} ALTER COLUMN payload SET DEFAULT 'null'"))
    # Which columns have a CHECK already (a table from migration 1 has all three).
    rows = yield Query(
        b"""
SELECT a.attname FROM pg_constraint c
  JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey)
 WHERE c.conrelid = %s::regclass AND c.contype = 'c' AND cardinality(c.conkey) = 1""",
        (n.regclass,),
    )
    checked = {r[0] for r in rows}
    for column, check in _CHECKS.items():
        if column not in checked:
            # Validated at once: a row that breaks it fails the migration,
            # and the whole install rolls back.
            yield Query(n.render("ALTER TABLE {table} ADD CHECK (" + check + ")"))


# Every job leaves two dead tuples (claim, delete). The default trigger, 20%
# of the table, lets a big table (a large backlog, jobs scheduled far ahead)
# pile up dead entries that every claim steps over; a fixed threshold does
# not (docs/performance.md#autovacuum has the measurements).
AUTOVACUUM_SETTINGS: Final[Mapping[str, str]] = {
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0",
    "autovacuum_analyze_threshold": "5000",
}


def _autovacuum(n: SchemaNames) -> Plan[None]:
    settings = ", ".join(f"{k} = {v}" for k, v in AUTOVACUUM_SETTINGS.items())
    yield Query(n.render("ALTER TABLE {table} SET (" + settings + ")"))


def _history(n: SchemaNames) -> Plan[None]:
    # Rows that left the queue table: succeeded jobs, and dead jobs an
    # operator purged. Written only by a queue made with history=True.
    yield Query(
        n.render("""
CREATE TABLE IF NOT EXISTS {history} (
    id           bigint NOT NULL,
    kind         text NOT NULL,
    payload      jsonb NOT NULL,
    attempts     integer NOT NULL,
    max_attempts integer NOT NULL,
    outcome      text NOT NULL CHECK (outcome IN ('succeeded', 'dead')),
    last_error   text,
    locked_by    text,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL DEFAULT now()
)""")
    )
    # Retention deletes by age.
    yield Query(n.render("CREATE INDEX IF NOT EXISTS {history_index} ON {history} (finished_at)"))


def _orphans_index(n: SchemaNames) -> Plan[None]:
    # The orphaned jobs waiting to run alone: few, and found without reading
    # the backlog, which a busy worker's look for them would otherwise scan.
    yield Query(ORPHANS_INDEX.create(n))


def _running_index(n: SchemaNames) -> Plan[None]:
    # The running jobs only: a handful (workers x batch), whatever else the
    # table holds. The reaper finds expired leases through it; without it,
    # it read the whole table, dead jobs awaiting purge included, and a
    # role's short statement_timeout cancelled it on a big table every time,
    # so that a crashed worker's jobs stayed running for ever.
    #
    # Keyed by locked_at, so that the reaper reads the leases older than its
    # cut-off, not the entries that the jobs claimed and finished since the
    # last vacuum leave behind (keyed by id, it would read them all, at each
    # reap). "locked_at IS NOT NULL" changes nothing it holds (a running job
    # has a lock time) but keeps the planner from using it for the
    # statements that find running jobs by id (a worker's turn, complete,
    # heartbeat): they say nothing of locked_at, so they read the primary
    # key as before. Without it the planner read this index whole for them,
    # and the drain lost a third (docs/performance.md#the-reapers-index).
    #
    # On a big table, an operator builds it beforehand without blocking
    # writes (CREATE INDEX CONCURRENTLY, same name and definition), and this
    # migration keeps it; unless that build failed and left it unusable.
    yield from _check_prebuilt_index(n, RUNNING_INDEX)
    yield Query(RUNNING_INDEX.create(n))


def _dead_index(n: SchemaNames) -> Plan[None]:
    # The dead jobs only: what an operator lists, counts, retries and purges
    # (the web dashboard, ``pgqueue dead``), read without the backlog. A
    # dashboard that counted dead jobs by reading a table of a million
    # pending ones, once a second, cost a draining worker a fifth of its
    # rate (docs/performance.md#the-web-dashboard-beside-a-draining-worker).
    # A job enters it when it dies and leaves it when it is retried or
    # purged: a job that never dies never touches it.
    #
    # On a big table, build it beforehand with CREATE INDEX CONCURRENTLY
    # (same name and definition); this migration keeps it.
    yield from _check_prebuilt_index(n, DEAD_INDEX)
    yield Query(DEAD_INDEX.create(n))


def _check_prebuilt_index(n: SchemaNames, index: Index) -> Plan[None]:
    """Accept an index an operator built beforehand (CREATE INDEX CONCURRENTLY,
    same name and definition) so that ``CREATE INDEX IF NOT EXISTS`` keeps it;
    refuse one that is invalid, of another table, or another definition."""
    name, definition, unique = n.index_regclass(index.suffix), index.shown, index.unique
    rows = yield Query(
        b"""
SELECT i.indrelid IS NOT DISTINCT FROM %s::regclass, i.indisvalid,
       CASE WHEN i.indisunique = %s THEN split_part(pg_get_indexdef(c.oid), ' USING ', 2) END
  FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.oid = to_regclass(%s)""",
        (n.regclass, unique, name),
    )
    if not rows:
        return
    [(ours, valid, found)] = rows
    if not ours:
        raise SchemaError(
            f"{name} exists and is not an index of {n.table_name}: "
            "rename or drop it, then install again"
        )
    if not valid:
        raise SchemaError(
            f"index {name} exists but is invalid (a CREATE INDEX CONCURRENTLY that "
            "failed, or is still running): drop it (DROP INDEX CONCURRENTLY) and build "
            "it again, or drop it and let install() build it"
        )
    if found != definition:
        if found is None:
            found = "a unique index" if not unique else "an index that is not unique"
        raise SchemaError(
            f"index {name} exists but is not the one pgqueue needs: it is {found}, not "
            f"{definition} (see docs/migrations.md); drop it and install again"
        )


def _queues_priorities_unique_schedules(n: SchemaNames) -> Plan[None]:
    # Each job belongs to a named queue and has a priority (larger first).
    # Adding a column with a constant default rewrites nothing.
    yield Query(
        n.render("""
ALTER TABLE {table}
    ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'default',
    ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS unique_key text,
    ADD COLUMN IF NOT EXISTS unique_scope text""")
    )
    # NOT VALID, then VALIDATE: existing rows are read without blocking writes.
    for check in (
        "priority BETWEEN -100 AND 100",
        "unique_scope IN ('queued', 'active', 'window')",
        "(unique_key IS NULL) = (unique_scope IS NULL)",
    ):
        yield Query(n.render("ALTER TABLE {table} ADD CHECK (" + check + ") NOT VALID"))
    yield Query(
        n.render(
            "ALTER TABLE {history} ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'default',"
            " ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0"
        )
    )
    # The claim index: the pending jobs by queue and priority, then in the
    # order they are due. A claim walks the (queue, priority) levels present
    # and reads each level from its due end (see `pgqueue.core.sql`), so it
    # reads O(batch) entries whatever other queues, lower priorities or
    # future jobs the table holds. It replaces the ready index of migration
    # 1, which it covers for every claim; two indexes would slow every write,
    # but the workers of the release before this one claim through the ready
    # index: it is dropped by this migration's contract step
    # (`_drop_ready_index`), once they are gone.
    yield from _check_prebuilt_index(n, CLAIM_INDEX)
    yield Query(CLAIM_INDEX.create(n))
    # Unique jobs. A job leaves its index's predicate for good when it
    # starts (queued: its first claim makes attempts > 0, and neither a
    # retry nor a release brings it back to 0) or ends (active: dead, or
    # deleted): no worker statement can collide with a newer duplicate.
    for index in UNIQUE_INDEXES.values():
        yield from _check_prebuilt_index(n, index)
        yield Query(index.create(n))
    # unique_for: the key is held for a window, even after its job is gone.
    yield Query(
        n.render("""
CREATE TABLE IF NOT EXISTS {unique_leases} (
    unique_key text PRIMARY KEY,
    job_id     bigint NOT NULL,
    expires_at timestamptz NOT NULL
)""")
    )
    # Paused queues (a row per queue an operator touched).
    yield Query(
        n.render("""
CREATE TABLE IF NOT EXISTS {queues} (
    queue      text PRIMARY KEY,
    paused     boolean NOT NULL DEFAULT false,
    changed_at timestamptz NOT NULL DEFAULT now()
)""")
    )
    # Schedules: what each one enqueues, and the last tick it enqueued.
    yield Query(
        n.render("""
CREATE TABLE IF NOT EXISTS {schedules} (
    name        text PRIMARY KEY,
    kind        text NOT NULL,
    cron        text,
    every       interval,
    tz          text NOT NULL DEFAULT 'UTC',
    payload     jsonb NOT NULL DEFAULT 'null',
    queue       text NOT NULL DEFAULT 'default',
    priority    smallint NOT NULL DEFAULT 0,
    overlap     boolean NOT NULL DEFAULT true,
    paused      boolean NOT NULL DEFAULT false,
    last_tick   timestamptz,
    last_job_id bigint,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((cron IS NULL) <> (every IS NULL))
)""")
    )
    # Every claim reads the paused queues, enqueues with unique_for write
    # leases, the reaper prunes them, workers tick schedules: a role that may
    # read and write the queue table may use the new tables alike, so that
    # an upgrade does not stop the workers of an application whose runtime
    # role the owner granted the queue table only (docs/reliability.md,
    # "Least privilege").
    yield from _grant_like_queue_table(n, n.queues, n.unique_leases, n.schedules)


def _grant_like_queue_table(n: SchemaNames, *tables: sql.Identifier) -> Plan[None]:
    """Grant ``tables`` to every role granted the queue table, with the same
    privileges (of SELECT, INSERT, UPDATE, DELETE)."""
    grants = yield Query(
        b"""
SELECT pg_get_userbyid(a.grantee), a.privilege_type
  FROM pg_class AS c, aclexplode(c.relacl) AS a
 WHERE c.oid = %s::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
   AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
 ORDER BY 1, 2""",
        (n.regclass,),
    )
    by_role: dict[str, list[str]] = {}
    for role, privilege in grants:
        by_role.setdefault(role, []).append(privilege)
    for role, privileges in by_role.items():
        yield Query(
            sql.SQL("GRANT {} ON {} TO {}")
            .format(
                sql.SQL(", ").join(map(sql.SQL, privileges)),
                sql.SQL(", ").join(tables),
                sql.Identifier(role),
            )
            .as_bytes(None)
        )


def _cancel_results_limits(n: SchemaNames) -> Plan[None]:
    # Cancellation, results and limits (docs/cancel.md, docs/results.md,
    # docs/limits.md). Columns without defaults: adding them rewrites nothing.
    yield Query(
        n.render("""
ALTER TABLE {table}
    ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz,
    ADD COLUMN IF NOT EXISTS result_ttl interval,
    ADD COLUMN IF NOT EXISTS limit_key text""")
    )
    yield Query(n.render("ALTER TABLE {table} ADD CHECK (result_ttl > interval '0') NOT VALID"))
    # History records cancelled jobs too.
    checks = yield Query(
        b"""
SELECT conname FROM pg_constraint
 WHERE conrelid = %s::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE %s""",
        (n.history.as_bytes(None).decode(), "%outcome%"),
    )
    for (name,) in checks:
        yield Query(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}")
            .format(n.history, sql.Identifier(name))
            .as_bytes(None)
        )
    yield Query(
        n.render(
            "ALTER TABLE {history} ADD CHECK (outcome IN ('succeeded', 'dead', 'cancelled'))"
            " NOT VALID"
        )
    )
    # The claim index, again: a job held back by a limit is claimed through
    # the limited index, by its key, when a slot is free; the claim of every
    # other job must not read past such jobs, so they leave its index.
    yield from _check_prebuilt_index(n, UNLIMITED_INDEX)
    yield Query(UNLIMITED_INDEX.create(n))
    # The claim index stays until this migration's contract step
    # (`_drop_claim_index`): the release before reads it.
    yield from _check_prebuilt_index(n, LIMITED_INDEX)
    yield Query(LIMITED_INDEX.create(n))
    # Results of jobs enqueued with result_ttl, kept until expires_at.
    yield Query(
        n.render("""
CREATE TABLE IF NOT EXISTS {results} (
    job_id      bigint PRIMARY KEY,
    kind        text NOT NULL,
    queue       text NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('succeeded', 'dead', 'cancelled')),
    value       jsonb,
    error       text,
    attempts    integer NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
)""")
    )
    yield Query(n.render("CREATE INDEX IF NOT EXISTS {results_index} ON {results} (expires_at)"))
    # Limits: the most jobs of a key that may run at once, as that many slot
    # rows. A claim takes a free slot (SKIP LOCKED) for each job it takes,
    # and writes the job's id and attempt in it; the statement that records
    # the job's outcome (or the reaper's) frees it, fenced by both.
    yield Query(
        n.render("""
CREATE TABLE IF NOT EXISTS {limits} (
    limit_key  text PRIMARY KEY,
    max_running integer NOT NULL CHECK (max_running >= 0),
    changed_at timestamptz NOT NULL DEFAULT now()
)""")
    )
    yield Query(
        n.render("""
CREATE TABLE IF NOT EXISTS {limit_slots} (
    limit_key text NOT NULL,
    slot      integer NOT NULL,
    job_id    bigint,
    attempt   integer,
    taken_at  timestamptz,
    PRIMARY KEY (limit_key, slot),
    CHECK ((job_id IS NULL) = (attempt IS NULL))
)""")
    )
    yield from _grant_like_queue_table(n, n.results, n.limits, n.limit_slots)


def _trace_context(n: SchemaNames) -> Plan[None]:
    # The W3C traceparent of the span that enqueued a job (docs/tracing.md),
    # NULL for jobs enqueued while tracing is off. No default: adding it is a
    # change to the catalog only, and a NULL takes no room in a row.
    yield Query(n.render("ALTER TABLE {table} ADD COLUMN IF NOT EXISTS trace_context text"))


def _rate_limits(n: SchemaNames) -> Plan[None]:
    # Rate limits (docs/limits.md): a token bucket per key, beside its
    # concurrency limit, in the same row. A key may have a rate and no
    # limit set (max_running NULL: one job at a time, as without a row).
    yield Query(
        n.render("""
ALTER TABLE {limits}
    ALTER COLUMN max_running DROP NOT NULL,
    ADD COLUMN IF NOT EXISTS per_second  double precision CHECK (per_second > 0),
    ADD COLUMN IF NOT EXISTS burst       integer CHECK (burst >= 1),
    ADD COLUMN IF NOT EXISTS tokens      double precision,
    ADD COLUMN IF NOT EXISTS refilled_at timestamptz,
    ADD CHECK ((per_second IS NULL) = (burst IS NULL))""")
    )


# The share of each heap page that inserts fill, leaving the rest for the
# claim's new version of each row. The claim is never a HOT update (it
# changes status, in every partial index's predicate), but with room on the
# page its new version stays there: PostgreSQL then logs only the bytes
# that changed (attempts to locked_by) instead of the whole row, and no
# extra lock record for the move to another page. A claimed row is larger
# than a pending one (locked_at, locked_by), so a page must keep more than
# half its room free. Measured with benchmarks/wal.py (50,000 no-op jobs,
# asyncio): 493 B of WAL per job to claim and delete at 100, 393 at 50, 382
# at 40 and at 30 (docs/performance.md#wal-per-job).
FILLFACTOR: Final = 40


def _fillfactor(n: SchemaNames) -> Plan[None]:
    # Pages already full keep their rows; new ones are filled to FILLFACTOR.
    # Takes a SHARE UPDATE EXCLUSIVE lock: reads and writes go on.
    yield Query(n.render(f"ALTER TABLE {{table}} SET (fillfactor = {FILLFACTOR})"))


def _dependencies(n: SchemaNames) -> Plan[None]:
    # Workflows (docs/workflows.md). A job enqueued with depends_on is
    # 'waiting', outside every claim's index, until `waiting_on` (its
    # dependencies not yet succeeded) reaches 0; `parents` holds its direct
    # dependencies' ids and their kept result values. A job that others wait
    # for has `dependents` (how many were ever attached: the statements that
    # end it look for them only then). Columns without defaults: adding them
    # rewrites nothing, and a job outside workflows keeps them NULL.
    yield Query(
        n.render("""
ALTER TABLE {table}
    ADD COLUMN IF NOT EXISTS waiting_on integer,
    ADD COLUMN IF NOT EXISTS dependents integer,
    ADD COLUMN IF NOT EXISTS parents jsonb""")
    )
    # The status check gains 'waiting' (NOT VALID: no scan; rows are valid).
    checks = yield Query(
        b"""
SELECT conname FROM pg_constraint
 WHERE conrelid = %s::regclass AND contype = 'c'
   AND pg_get_constraintdef(oid) LIKE '%%status%%' AND pg_get_constraintdef(oid) LIKE '%%dead%%'""",
        (n.regclass,),
    )
    for (name,) in checks:
        yield Query(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}")
            .format(n.table, sql.Identifier(name))
            .as_bytes(None)
        )
    yield Query(
        n.render(
            "ALTER TABLE {table} ADD CHECK (status IN ('pending', 'running', 'dead', 'waiting'))"
            " NOT VALID"
        )
    )
    # One row per dependency of a waiting job, found by the job it waits for.
    yield Query(
        n.render("""
CREATE TABLE IF NOT EXISTS {dependencies} (
    parent_id bigint NOT NULL,
    job_id    bigint NOT NULL,
    PRIMARY KEY (parent_id, job_id)
)""")
    )
    yield from _check_prebuilt_index(n, WAITING_INDEX)
    yield Query(WAITING_INDEX.create(n))
    yield from _grant_like_queue_table(n, n.dependencies)


def _drop_ready_index(n: SchemaNames) -> Plan[None]:
    yield Query(n.render("DROP INDEX IF EXISTS {ready_index}"))


def _drop_claim_index(n: SchemaNames) -> Plan[None]:
    yield Query(n.render("DROP INDEX IF EXISTS {claim_index}"))


MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(1, "queue table and its partial ready index", _table_and_ready_index),
    Migration(2, "checks on status and attempts, a default payload", _constraints),
    Migration(3, "autovacuum by a fixed number of dead rows", _autovacuum),
    Migration(4, "history table for jobs that left the queue", _history),
    Migration(5, "partial index of orphaned jobs", _orphans_index),
    Migration(6, "partial index of running jobs, for the reaper", _running_index),
    Migration(
        7,
        "queues, priorities, unique jobs and schedules",
        _queues_priorities_unique_schedules,
        _drop_ready_index,
        "the ready index of migration 1 ({name}_ready), which the claim index replaces",
    ),
    Migration(
        8,
        "cancellation, results and limits",
        _cancel_results_limits,
        _drop_claim_index,
        "the claim index of migration 7 ({name}_claim), which {name}_unlimited replaces",
    ),
    Migration(9, "the trace context of each job, for tracing", _trace_context),
    Migration(10, "rate limits", _rate_limits),
    Migration(11, "partial index of dead jobs, for operators", _dead_index),
    Migration(12, "heap pages keep room for the claim's update: less WAL per job", _fillfactor),
    Migration(13, "dependencies: waiting jobs, chains and groups", _dependencies),
)
LATEST_VERSION: Final = MIGRATIONS[-1].version


# One installer at a time per database: concurrent CREATE ... IF NOT EXISTS
# can still collide in the catalog.
_INSTALL_LOCK: Final = b"SELECT pg_advisory_xact_lock(hashtext('pgqueue:install'))"


def _record_table(n: SchemaNames) -> Plan[None]:
    """Create ``pgqueue_schema``, or give an older one the contract columns."""
    yield Query(
        n.render("""
CREATE TABLE IF NOT EXISTS {versions} (
    queue_table      text NOT NULL,
    version          integer NOT NULL,
    description      text NOT NULL,
    applied_at       timestamptz NOT NULL DEFAULT now(),
    contract_pending boolean NOT NULL DEFAULT false,
    contracted_at    timestamptz,
    PRIMARY KEY (queue_table, version)
)""")
    )
    ((recorded,),) = yield Query(_HAS_CONTRACT_COLUMNS, (n.versions_regclass,))
    if not recorded:
        # A record kept by a release before expand and contract: its
        # migrations dropped what they replaced at once, so none of its rows
        # has a contract step pending (the default).
        yield Query(
            n.render(
                "ALTER TABLE {versions}"
                " ADD COLUMN IF NOT EXISTS contract_pending boolean NOT NULL DEFAULT false,"
                " ADD COLUMN IF NOT EXISTS contracted_at timestamptz"
            )
        )


_HAS_CONTRACT_COLUMNS: Final = b"""
SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass(%s)
                AND attname = 'contract_pending' AND NOT attisdropped)"""


def install_plan(n: SchemaNames) -> Plan[list[int]]:
    """Apply the expand half of the missing migrations to one queue table;
    return the versions applied.

    What a migration makes obsolete stays, recorded as pending, until
    `contract_plan` drops it; except in a table this install creates, which
    no older release ever used: there it goes at once. The caller runs it in
    one transaction: a failed migration leaves the schema as it was.
    """
    yield Query(_INSTALL_LOCK)
    yield from _record_table(n)
    ((current,),) = yield Query(
        n.render("SELECT coalesce(max(version), 0) FROM {versions} WHERE queue_table = %s"),
        (n.key,),
    )
    check_version(n, current)
    created = False
    if current == 0:
        # A table built by hand is adopted: its own workers may still claim
        # through its ready index, which then waits for the contract step.
        ((created,),) = yield Query(b"SELECT to_regclass(%s) IS NULL", (n.regclass,))
    applied = []
    for migration in MIGRATIONS[current:]:
        yield from migration.apply(n)
        yield Query(
            n.render(
                "INSERT INTO {versions} (queue_table, version, description, contract_pending)"
                " VALUES (%s, %s, %s, %s)"
            ),
            (n.key, migration.version, migration.description, migration.contract is not None),
        )
        applied.append(migration.version)
    if created:
        yield from _contract_pending(n)
    return applied


def contract_plan(n: SchemaNames) -> Plan[list[int]]:
    """Apply the missing migrations, then every pending contract step; return
    the versions whose contract step ran.

    For when every process runs this release: what the contract steps drop,
    the releases before it used (docs/migrations.md, "Rolling deploys").
    """
    yield from install_plan(n)
    return (yield from _contract_pending(n))


def _contract_pending(n: SchemaNames) -> Plan[list[int]]:
    rows = yield Query(
        n.render(
            "SELECT version FROM {versions} WHERE queue_table = %s AND contract_pending"
            " ORDER BY version"
        ),
        (n.key,),
    )
    done = [int(version) for (version,) in rows]
    for version in done:
        contract = MIGRATIONS[version - 1].contract
        if contract is not None:
            yield from contract(n)
    if done:
        yield Query(
            n.render(
                "UPDATE {versions} SET contract_pending = false, contracted_at = now()"
                " WHERE queue_table = %s AND version = ANY(%s)"
            ),
            (n.key, done),
        )
    return done


def pending_contract_plan(n: SchemaNames) -> Plan[dict[int, str]]:
    """The table's contract steps not run yet: what each drops, by version."""
    ((recorded,),) = yield Query(_HAS_CONTRACT_COLUMNS, (n.versions_regclass,))
    if not recorded:
        return {}
    rows = yield Query(
        n.render(
            "SELECT version FROM {versions} WHERE queue_table = %s AND contract_pending"
            " ORDER BY version"
        ),
        (n.key,),
    )
    pending = {}
    for (version,) in rows:
        if version <= LATEST_VERSION:  # else install() refuses the table anyway
            drops = MIGRATIONS[version - 1].drops or "what it replaced"
            pending[int(version)] = drops.format(name=n.key)
    return pending


def uninstall_plan(n: SchemaNames) -> Plan[None]:
    """Drop the queue table, its history table and its schema record."""
    yield Query(_INSTALL_LOCK)
    yield Query(
        n.render(
            "DROP TABLE IF EXISTS {table}, {history}, {queues}, {unique_leases}, {schedules},"
            " {results}, {limits}, {limit_slots}, {dependencies}"
        )
    )
    ((exists,),) = yield Query(b"SELECT to_regclass(%s) IS NOT NULL", (n.versions_regclass,))
    if exists:
        yield Query(n.render("DELETE FROM {versions} WHERE queue_table = %s"), (n.key,))


# What a role needs on each table of a queue (docs/reliability.md, "Least
# privilege"): the runtime (enqueue, workers, operator commands) and a
# read-only role (monitoring, a read-only dashboard).
RUNTIME_GRANT = "SELECT, INSERT, UPDATE, DELETE"
HISTORY_GRANT = "SELECT, INSERT, DELETE"
READ_ONLY_GRANT = "SELECT"


def validate_role(role: object) -> str:
    """A role name to grant to: any name PostgreSQL takes, quoted when used."""
    if not isinstance(role, str):
        raise TypeError(f"role must be a str, not {type(role).__name__}")
    if not role or "\x00" in role or len(role.encode()) > 63:
        raise ValueError(f"invalid role name {role!r}: 1 to 63 bytes, no NUL")
    return role


def grant_plan(n: SchemaNames, role: str, *, read_only: bool = False) -> Plan[list[str]]:
    """Grant ``role`` what the runtime (or, ``read_only``, a reader) needs on
    the installed queue: its schema, tables and sequence. Returns the
    statements run, for the record."""
    who = sql.Identifier(role)
    ((installed,),) = yield Query(b"SELECT to_regclass(%s) IS NOT NULL", (n.regclass,))
    if not installed:
        raise ValueError(f"table {n.table_name} is not installed: run install() (migrate) first")
    ((schema, history, seq_schema, seq_name),) = yield Query(
        b"SELECT ns.nspname, to_regclass(%s) IS NOT NULL, sn.nspname, sc.relname"
        b" FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace"
        b" JOIN pg_class sc ON sc.oid = pg_get_serial_sequence(%s, 'id')::regclass"
        b" JOIN pg_namespace sn ON sn.oid = sc.relnamespace"
        b" WHERE c.oid = %s::regclass",
        (n.history.as_bytes(None).decode(), n.regclass, n.regclass),
    )
    tables = sql.SQL(", ").join(
        [
            n.table,
            n.queues,
            n.unique_leases,
            n.schedules,
            n.results,
            n.limits,
            n.limit_slots,
            n.dependencies,
        ]
    )
    grants = [sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), who)]
    privileges = READ_ONLY_GRANT if read_only else RUNTIME_GRANT
    grants.append(sql.SQL("GRANT {} ON {} TO {}").format(sql.SQL(privileges), tables, who))
    if not read_only:
        sequence = sql.Identifier(seq_schema, seq_name)
        grants.append(sql.SQL("GRANT USAGE ON SEQUENCE {} TO {}").format(sequence, who))
    if history:
        privileges = READ_ONLY_GRANT if read_only else HISTORY_GRANT
        grants.append(sql.SQL("GRANT {} ON {} TO {}").format(sql.SQL(privileges), n.history, who))
    done = []
    for grant in grants:
        statement = grant.as_bytes(None)
        yield Query(statement)
        done.append(statement.decode())
    return done


def check_version(n: SchemaNames, version: int) -> None:
    """Refuse a schema newer than this library knows."""
    if version > LATEST_VERSION:
        raise SchemaTooNew(
            f"table {n.table_name} is at schema version {version}, but this pgqueue knows "
            f"versions up to {LATEST_VERSION}: upgrade pgqueue before using this table"
        )


def version_plan(n: SchemaNames) -> Plan[int | None]:
    """The table's schema version; None if pgqueue never installed it."""
    ((exists,),) = yield Query(b"SELECT to_regclass(%s) IS NOT NULL", (n.versions_regclass,))
    if not exists:
        return None
    ((version,),) = yield Query(
        n.render("SELECT max(version) FROM {versions} WHERE queue_table = %s"), (n.key,)
    )
    return None if version is None else int(version)
