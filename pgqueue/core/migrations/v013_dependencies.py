"""Migration 13: dependencies, for waiting jobs, chains and groups."""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from ..schema.predicates import WAITING_INDEX
from . import base
from .base import Migration, SchemaNames


def _dependencies(n: SchemaNames) -> Plan[None]:
    # Workflows (docs/workflows.md). A job enqueued with depends_on is
    # 'waiting', outside every claim's index, until `waiting_on` (its
    # dependencies not yet succeeded) reaches 0; `parents` holds its direct
    # dependencies' ids and their kept result values. A job that others wait
    # for has `dependents` (how many were ever attached: the statements that
    # end it look for them only then). Columns without defaults: adding them
    # rewrites nothing, and a job outside workflows keeps them NULL.
    yield base.add_columns(n, "table", "waiting_on integer", "dependents integer", "parents jsonb")
    # The status check gains 'waiting' (NOT VALID: no scan; rows are valid).
    status_checks = Query(
        b"""
SELECT conname FROM pg_constraint
 WHERE conrelid = %s::regclass AND contype = 'c'
   AND pg_get_constraintdef(oid) LIKE '%%status%%' AND pg_get_constraintdef(oid) LIKE '%%dead%%'""",
        (n.regclass,),
    )
    yield from base.replace_checks(
        n.table, status_checks, "status IN ('pending', 'running', 'dead', 'waiting')"
    )
    # One row per dependency of a waiting job, found by the job it waits for.
    yield base.create_table(
        n,
        "dependencies",
        """\
    parent_id bigint NOT NULL,
    job_id    bigint NOT NULL,
    PRIMARY KEY (parent_id, job_id)""",
    )
    yield from base.check_prebuilt_index(n, WAITING_INDEX)
    yield Query(WAITING_INDEX.create(n))
    yield from base.grant_like_queue_table(n, n.dependencies)


MIGRATION: Final = Migration(13, "dependencies: waiting jobs, chains and groups", _dependencies)
