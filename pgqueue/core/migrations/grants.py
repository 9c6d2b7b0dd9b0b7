"""What a role needs on each table of a queue, and the plan that grants it."""

from __future__ import annotations

from psycopg import sql

from ..plans import Plan, Query
from .base import SchemaNames

__all__ = ["HISTORY_GRANT", "READ_ONLY_GRANT", "RUNTIME_GRANT", "grant_plan", "validate_role"]


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
