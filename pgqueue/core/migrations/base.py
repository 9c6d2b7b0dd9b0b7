"""What every migration shares: the errors, the `Migration` record, the
statements several versions write alike (a new table, new columns, a wider
check), and the checks and grants that several versions run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from psycopg import sql

from ..plans import Plan, Query
from ..schema.names import TableNames
from ..schema.predicates import Index

__all__ = [
    "IncompatibleTable",
    "Migration",
    "SchemaError",
    "SchemaNames",
    "SchemaTooNew",
    "add_columns",
    "check_prebuilt_index",
    "create_table",
    "grant_like_queue_table",
    "replace_checks",
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


def add_columns(n: SchemaNames, name: str, *columns: str) -> Query:
    """``ALTER TABLE`` the table ``n`` calls ``name``: ``ADD COLUMN IF NOT
    EXISTS`` each of ``columns`` (its name and type), one a line."""
    added = ",".join("\n    ADD COLUMN IF NOT EXISTS " + column for column in columns)
    return Query(n.render("\nALTER TABLE {" + name + "}" + added))


def create_table(n: SchemaNames, name: str, columns: str) -> Query:
    """``CREATE TABLE IF NOT EXISTS`` the table ``n`` calls ``name`` (``"history"``
    ...), with ``columns``: its column and constraint lines, as the statement shows them."""
    return Query(n.render("\nCREATE TABLE IF NOT EXISTS {" + name + "} (\n" + columns + "\n)"))


def replace_checks(table: sql.Identifier, found: Query, check: str) -> Plan[None]:
    """Drop the check constraints of ``table`` that ``found`` names (a query
    of ``pg_constraint``), then add ``check`` in their place, NOT VALID: the
    rows already there met the narrower checks, and none is read."""
    names = yield found
    for (name,) in names:
        yield Query(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}")
            .format(table, sql.Identifier(name))
            .as_bytes(None)
        )
    yield Query(
        sql.SQL("ALTER TABLE {} ADD CHECK (" + check + ") NOT VALID").format(table).as_bytes(None)
    )


def check_prebuilt_index(n: SchemaNames, index: Index) -> Plan[None]:
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


def grant_like_queue_table(n: SchemaNames, *tables: sql.Identifier) -> Plan[None]:
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
