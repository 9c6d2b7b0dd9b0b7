"""Migration 4: the history table, for jobs that left the queue."""

from __future__ import annotations

from typing import Final

from ..plans import Plan, Query
from .base import Migration, SchemaNames, create_table


def _history(n: SchemaNames) -> Plan[None]:
    # Rows that left the queue table: succeeded jobs, and dead jobs an
    # operator purged. Written only by a queue made with history=True.
    yield create_table(
        n,
        "history",
        """\
    id           bigint NOT NULL,
    kind         text NOT NULL,
    payload      jsonb NOT NULL,
    attempts     integer NOT NULL,
    max_attempts integer NOT NULL,
    outcome      text NOT NULL CHECK (outcome IN ('succeeded', 'dead')),
    last_error   text,
    locked_by    text,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL DEFAULT now()""",
    )
    # Retention deletes by age.
    yield Query(n.render("CREATE INDEX IF NOT EXISTS {history_index} ON {history} (finished_at)"))


MIGRATION: Final = Migration(4, "history table for jobs that left the queue", _history)
