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

One module per version (``v001_table.py`` ...), each with its `Migration`;
this module lists them in `MIGRATIONS` and holds the plans that apply them.
"""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from . import (
    v001_table,
    v002_constraints,
    v003_autovacuum,
    v004_history,
    v005_orphans_index,
    v006_running_index,
    v007_queues_priorities_unique_schedules,
    v008_cancel_results_limits,
    v009_trace_context,
    v010_rate_limits,
    v011_dead_index,
    v012_fillfactor,
    v013_dependencies,
)
from .base import (
    IncompatibleTable,
    Migration,
    SchemaError,
    SchemaNames,
    SchemaTooNew,
    create_table,
)
from .grants import (
    HISTORY_GRANT,
    READ_ONLY_GRANT,
    RUNTIME_GRANT,
    grant_plan,
    validate_role,
)
from .v001_table import REQUIRED_COLUMNS
from .v003_autovacuum import AUTOVACUUM_SETTINGS
from .v012_fillfactor import FILLFACTOR

__all__ = [
    "AUTOVACUUM_SETTINGS",
    "FILLFACTOR",
    "HISTORY_GRANT",
    "LATEST_VERSION",
    "MIGRATIONS",
    "READ_ONLY_GRANT",
    "REQUIRED_COLUMNS",
    "RUNTIME_GRANT",
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

# Every version, in order: a new migration is a new module, and one more line here.
MIGRATIONS: Final[tuple[Migration, ...]] = (
    v001_table.MIGRATION,
    v002_constraints.MIGRATION,
    v003_autovacuum.MIGRATION,
    v004_history.MIGRATION,
    v005_orphans_index.MIGRATION,
    v006_running_index.MIGRATION,
    v007_queues_priorities_unique_schedules.MIGRATION,
    v008_cancel_results_limits.MIGRATION,
    v009_trace_context.MIGRATION,
    v010_rate_limits.MIGRATION,
    v011_dead_index.MIGRATION,
    v012_fillfactor.MIGRATION,
    v013_dependencies.MIGRATION,
)
LATEST_VERSION: Final = MIGRATIONS[-1].version
assert [m.version for m in MIGRATIONS] == list(range(1, LATEST_VERSION + 1))


# One installer at a time per database: concurrent CREATE ... IF NOT EXISTS
# can still collide in the catalog.
_INSTALL_LOCK: Final = b"SELECT pg_advisory_xact_lock(hashtext('pgqueue:install'))"


def _record_table(n: SchemaNames) -> Plan[None]:
    """Create ``pgqueue_schema``, or give an older one the contract columns."""
    yield create_table(
        n,
        "versions",
        """\
    queue_table      text NOT NULL,
    version          integer NOT NULL,
    description      text NOT NULL,
    applied_at       timestamptz NOT NULL DEFAULT now(),
    contract_pending boolean NOT NULL DEFAULT false,
    contracted_at    timestamptz,
    PRIMARY KEY (queue_table, version)""",
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
