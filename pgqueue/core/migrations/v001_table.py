"""Migration 1: the queue table, and its partial ready index."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..plans import Plan, Query
from ..schema.predicates import READY_INDEX
from .base import IncompatibleTable, Migration, SchemaNames, create_table

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
    yield create_table(
        n,
        "table",
        """\
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
    created_at   timestamptz NOT NULL DEFAULT now()""",
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


MIGRATION: Final = Migration(1, "queue table and its partial ready index", _table_and_ready_index)
