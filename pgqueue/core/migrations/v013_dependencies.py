"""Migration 13: dependencies, for waiting jobs, chains and groups."""

from __future__ import annotations

from typing import Final

from psycopg import sql

from ..plans import Plan, Query
from ..schema.predicates import WAITING_INDEX
from .base import Migration, SchemaNames, check_prebuilt_index, grant_like_queue_table


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
    yield from check_prebuilt_index(n, WAITING_INDEX)
    yield Query(WAITING_INDEX.create(n))
    yield from grant_like_queue_table(n, n.dependencies)


MIGRATION: Final = Migration(13, "dependencies: waiting jobs, chains and groups", _dependencies)
