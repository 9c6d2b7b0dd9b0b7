"""Migration 2: checks on status and attempts, a default payload."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..plans import Plan, Query
from .base import Migration, SchemaNames

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


MIGRATION: Final = Migration(2, "checks on status and attempts, a default payload", _constraints)
