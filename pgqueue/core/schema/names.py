"""Every identifier of one queue table, derived once from the table's name.

A queue table ``<schema>.<name>`` comes with side tables in its schema
(``<name>_history``, ``<name>_queues`` ...), indexes (an index lives in
its table's schema, and is named without it), the ``pgqueue_schema``
version table, and three notification channels. Statements, migrations and
the dashboard all take these from `TableNames`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Any, Final

from psycopg import sql

from ..jobs import MAX_IDENTIFIER_LENGTH, validate_table_name

__all__ = ["UNIQUE_SCOPES", "TableNames", "notification_channel", "quoted"]

# The side tables of a queue table, named ``<name>_<field>``.
SIDE_TABLES: Final = (
    "history",
    "queues",
    "unique_leases",
    "schedules",
    "results",
    "limits",
    "limit_slots",
    "dependencies",
)
# Its indexes by field: each named ``<name>_<suffix>``.
INDEXES: Final = {
    "ready_index": "ready",
    "history_index": "history_finished",
    "orphans_index": "orphans",
    "running_index": "running",
    "dead_index": "dead",
    "claim_index": "claim",
    "unique_queued_index": "unique_queued",
    "unique_active_index": "unique_active",
    "unlimited_index": "unlimited",
    "limited_index": "limited",
    "results_index": "results_expiry",
    "waiting_index": "waiting",
}

# The scopes of unique jobs that a unique index holds (migration 7).
UNIQUE_SCOPES: Final = ("queued", "active")


def notification_channel(table: str) -> str:
    """The LISTEN/NOTIFY channel of a queue table: one per table, so queues
    in one database do not wake each other.

    A channel name is an identifier of at most 63 bytes (`pg_notify` refuses
    a longer one, `LISTEN` truncates it); a longer ``schema.table`` keeps
    its first 54 characters and gets a digest of the whole name.

    >>> notification_channel("app.jobs")
    'app.jobs'
    >>> len(notification_channel("s" * 40 + "." + "t" * 40))
    63
    """
    if len(table) <= MAX_IDENTIFIER_LENGTH:
        return table
    digest = hashlib.sha256(table.encode()).hexdigest()[:8]
    return f"{table[: MAX_IDENTIFIER_LENGTH - 9]}_{digest}"


def quoted(*parts: str) -> str:
    """A name quoted as ``::regclass`` and ``to_regclass`` read it."""
    return sql.Identifier(*parts).as_bytes(None).decode()


@dataclass(frozen=True, slots=True)
class TableNames:
    """The identifiers of one queue table's schema objects.

    >>> names = TableNames.for_table("app.jobs")
    >>> names.regclass, names.index_regclass("running"), names.control_channel
    ('"app"."jobs"', '"app"."jobs_running"', 'app.jobs:control')
    """

    table_name: str
    table: sql.Identifier
    # Side tables, in the queue table's schema.
    history: sql.Identifier
    queues: sql.Identifier
    unique_leases: sql.Identifier
    schedules: sql.Identifier
    results: sql.Identifier
    limits: sql.Identifier
    limit_slots: sql.Identifier
    # Which waiting job waits for which job (docs/workflows.md).
    dependencies: sql.Identifier
    versions: sql.Identifier
    # Indexes, named without their schema (they live in their table's).
    ready_index: sql.Identifier
    history_index: sql.Identifier
    orphans_index: sql.Identifier
    running_index: sql.Identifier
    dead_index: sql.Identifier
    claim_index: sql.Identifier
    unique_queued_index: sql.Identifier
    unique_active_index: sql.Identifier
    unlimited_index: sql.Identifier
    limited_index: sql.Identifier
    results_index: sql.Identifier
    waiting_index: sql.Identifier
    # The key of this table's rows in ``pgqueue_schema``, which lives in
    # the same schema: the table's own name is unique there.
    key: str
    schema: tuple[str, ...]
    # The names quoted for ``::regclass`` and ``to_regclass``.
    regclass: str
    versions_regclass: str
    # The channels: new jobs (wakes claims); cancel requests for running
    # jobs (payload: their ids), heard by workers beside `channel` but
    # waking no claim; results kept (payload: the job's id), heard by `wait`.
    channel: str
    control_channel: str
    results_channel: str

    @classmethod
    def for_table(cls, table: str) -> TableNames:
        parts = validate_table_name(table)
        schema, name = tuple(parts[:-1]), parts[-1]
        ident = sql.Identifier(*parts)
        versions = sql.Identifier(*schema, "pgqueue_schema")

        # Side tables in the queue table's schema; indexes named without it.
        identifiers: dict[str, Any] = {
            **{f: sql.Identifier(*schema, f"{name}_{f}") for f in SIDE_TABLES},
            **{f: sql.Identifier(f"{name}_{suffix}") for f, suffix in INDEXES.items()},
        }
        return cls(
            table_name=table,
            table=ident,
            versions=versions,
            **identifiers,
            key=name,
            schema=schema,
            regclass=ident.as_bytes(None).decode(),
            versions_regclass=versions.as_bytes(None).decode(),
            channel=notification_channel(table),
            control_channel=notification_channel(f"{table}:control"),
            results_channel=notification_channel(f"{table}:results"),
        )

    def index_name(self, suffix: str) -> str:
        """The name of the table's index ``<name>_<suffix>``, unquoted."""
        return f"{self.key}_{suffix}"

    def index_regclass(self, suffix: str) -> str:
        """The table's index ``<name>_<suffix>``, quoted for ``to_regclass``."""
        return quoted(*self.schema, self.index_name(suffix))

    @property
    def unique_index_regclasses(self) -> dict[str, str]:
        """The unique indexes, by scope, quoted for ``to_regclass``."""
        return {scope: self.index_regclass(f"unique_{scope}") for scope in UNIQUE_SCOPES}

    def identifiers(self) -> dict[str, sql.Identifier]:
        """Every identifier, by field name: the parts a template names."""
        return {
            f.name: value
            for f in fields(self)
            if isinstance(value := getattr(self, f.name), sql.Identifier)
        }

    def render(self, template: str, **parts: sql.Composable) -> bytes:
        """`template` with its ``{table}``, ``{history}`` ... (and `parts`) filled in."""
        return sql.SQL(template).format(**self.identifiers(), **parts).as_bytes(None)
