"""What an index and the statements that read it must agree on, said once.

A partial index serves a query only if the query's WHERE implies the
index's predicate: the claim reads the claim index only because it says
"pending, no limit key" as the index does. Each predicate is written here,
each index of the queue table is derived from its predicate (`Index`),
and the statements splice the same text in. ``tests/behaviour/test_schema_model.py``
checks every `Index` against ``pg_get_indexdef`` of a migrated table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from psycopg import sql

from ..jobs import LEASE_EXPIRED
from .names import UNIQUE_SCOPES, TableNames

__all__ = [
    "CLAIMABLE",
    "DEAD",
    "INDEXES",
    "LIMITED",
    "ORPHANED",
    "PENDING",
    "RUNNING",
    "UNIQUE_PREDICATES",
    "WAITING",
    "Index",
]

# A job that waits to run (due or not).
PENDING: Final = "status = 'pending'"
# A pending job without a limit key: what a claim reads by queue and priority.
CLAIMABLE: Final = "status = 'pending' AND limit_key IS NULL"
# A pending job held back by a limit: claimed by its key, when a slot is free.
LIMITED: Final = "status = 'pending' AND limit_key IS NOT NULL"
# A running job (a running job always has a lock time: see the running index).
RUNNING: Final = "status = 'running' AND locked_at IS NOT NULL"
DEAD: Final = "status = 'dead'"
# A job that waits for others (`depends_on`): outside every claim's index.
WAITING: Final = "status = 'waiting'"
# An orphaned job (`Job.orphaned`): its worker vanished holding it. Its
# claim reads the orphans index, whose predicate it is.
ORPHANED: Final = sql.SQL("starts_with(last_error, {})").format(sql.Literal(LEASE_EXPIRED))
_ORPHANED_TEXT: Final = ORPHANED.as_string(None)

# The predicates of the unique indexes (migration 7), by scope. A job leaves
# its predicate for good when it starts ("queued") or ends ("active").
UNIQUE_PREDICATES: Final = {
    "queued": "unique_scope = 'queued' AND status = 'pending' AND attempts = 0",
    "active": "unique_scope = 'active' AND status IN ('pending', 'running')",
}
assert tuple(UNIQUE_PREDICATES) == UNIQUE_SCOPES


@dataclass(frozen=True, slots=True)
class Index:
    """A partial index of the queue table, derived from its predicate.

    `shown` is the definition as ``pg_get_indexdef`` prints it after
    " USING ": what an index an operator built beforehand (CREATE INDEX
    CONCURRENTLY) must be for a migration to keep it.
    """

    suffix: str  # the index is named ``<table's name>_<suffix>``
    columns: str
    predicate: str
    shown: str
    unique: bool = False

    def create(self, names: TableNames) -> bytes:
        """``CREATE [UNIQUE] INDEX IF NOT EXISTS`` of this index on the table."""
        return names.render(
            f"CREATE {'UNIQUE ' if self.unique else ''}INDEX IF NOT EXISTS {{index}} ON {{table}}"
            f" ({self.columns}) WHERE {self.predicate}",
            index=sql.Identifier(names.index_name(self.suffix)),
        )


# Migration 1's ready index, replaced by the claim index (migration 7).
READY_INDEX: Final = Index(
    "ready", "run_at, id", PENDING, "btree (run_at, id) WHERE (status = 'pending'::text)"
)
ORPHANS_INDEX: Final = Index(
    "orphans",
    "run_at, id",
    f"{PENDING} AND {_ORPHANED_TEXT}",
    "btree (run_at, id) WHERE ((status = 'pending'::text)"
    f" AND starts_with(last_error, '{LEASE_EXPIRED}'::text))",
)
RUNNING_INDEX: Final = Index(
    "running",
    "locked_at",
    RUNNING,
    "btree (locked_at) WHERE ((status = 'running'::text) AND (locked_at IS NOT NULL))",
)
DEAD_INDEX: Final = Index("dead", "id", DEAD, "btree (id) WHERE (status = 'dead'::text)")
# Waiting jobs, for operators (`jobs --status waiting`) and counts (migration 13).
WAITING_INDEX: Final = Index(
    "waiting", "id", WAITING, "btree (id) WHERE (status = 'waiting'::text)"
)
# Migration 7's claim index, replaced by the unlimited one (migration 8).
CLAIM_INDEX: Final = Index(
    "claim",
    "queue, priority, run_at, id",
    PENDING,
    "btree (queue, priority, run_at, id) WHERE (status = 'pending'::text)",
)
UNIQUE_INDEXES: Final = {
    "queued": Index(
        "unique_queued",
        "unique_key",
        UNIQUE_PREDICATES["queued"],
        "btree (unique_key) WHERE ((unique_scope = 'queued'::text)"
        " AND (status = 'pending'::text) AND (attempts = 0))",
        unique=True,
    ),
    "active": Index(
        "unique_active",
        "unique_key",
        UNIQUE_PREDICATES["active"],
        "btree (unique_key) WHERE ((unique_scope = 'active'::text)"
        " AND (status = ANY (ARRAY['pending'::text, 'running'::text])))",
        unique=True,
    ),
}
# The claim index today: jobs without a limit key, by queue and priority.
UNLIMITED_INDEX: Final = Index(
    "unlimited",
    "queue, priority, run_at, id",
    CLAIMABLE,
    "btree (queue, priority, run_at, id)"
    " WHERE ((status = 'pending'::text) AND (limit_key IS NULL))",
)
LIMITED_INDEX: Final = Index(
    "limited",
    "limit_key, priority DESC, run_at, id",
    LIMITED,
    "btree (limit_key, priority DESC, run_at, id)"
    " WHERE ((status = 'pending'::text) AND (limit_key IS NOT NULL))",
)

# Every partial index a table of the latest version has.
INDEXES: Final = (
    ORPHANS_INDEX,
    RUNNING_INDEX,
    DEAD_INDEX,
    *UNIQUE_INDEXES.values(),
    UNLIMITED_INDEX,
    LIMITED_INDEX,
    WAITING_INDEX,
)
