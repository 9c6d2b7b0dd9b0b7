"""The job table's column lists: what a statement reads, copies and writes."""

from __future__ import annotations

from typing import Final

from psycopg import sql

__all__ = [
    "HISTORY_COLUMNS",
    "INSERT_COLUMNS",
    "JOB_COLUMNS",
    "LEAVING_COLUMNS",
    "job_columns",
    "job_json",
]

# The order `Job.from_row` reads.
JOB_COLUMNS: Final = (
    "id",
    "kind",
    "payload",
    "attempts",
    "max_attempts",
    "status",
    "run_at",
    "last_error",
    "locked_by",
    "locked_at",
    "created_at",
    "queue",
    "priority",
    "unique_key",
    "result_ttl",
    "limit_key",
    "cancel_requested",
    "trace_context",
    "parents",
)
# Columns read as an expression (`Job` takes plain values): the rest are read as they are.
READ_AS: Final = {
    "result_ttl": "extract(epoch FROM {}result_ttl)::float8",
    "cancel_requested": "{}cancel_requested_at IS NOT NULL",
}

# The columns the history table copies from a job that leaves the queue.
HISTORY_COLUMNS: Final = (
    "id",
    "kind",
    "payload",
    "attempts",
    "max_attempts",
    "last_error",
    "locked_by",
    "created_at",
    "queue",
    "priority",
)

# The columns `enqueue_many` writes, in the order of its COPY and unnest().
INSERT_COLUMNS: Final = (
    "id",
    "kind",
    "payload",
    "run_at",
    "max_attempts",
    "queue",
    "priority",
    "result_ttl",
    "limit_key",
)

# What a job that leaves the table (deleted) must tell the statement that
# deleted it, beyond the history's columns: to free its limit's slot (fenced
# by its attempt) and to keep its result.
# And whether jobs depend on it (`dependents`: released or cancelled with it).
LEAVING_COLUMNS: Final = (
    "attempts",
    "kind",
    "queue",
    "limit_key",
    "result_ttl",
    "last_error",
    "dependents",
)


def job_columns(prefix: str = "") -> sql.Composable:
    """`JOB_COLUMNS` as a select list (of the row ``prefix``, if given)."""
    row = f"{prefix}." if prefix else ""
    return sql.SQL(", ").join(
        sql.SQL(READ_AS[c].format(row) + " AS {}").format(sql.Identifier(c))
        if c in READ_AS
        else (sql.Identifier(prefix, c) if prefix else sql.Identifier(c))
        for c in JOB_COLUMNS
    )


def job_json(row: str) -> sql.Composable:
    """The `JOB_COLUMNS` of ``row`` (a relation that read them through
    `job_columns`) as one JSON array, in order (`Job.from_json`)."""
    return sql.SQL("json_build_array({})").format(
        sql.SQL(", ").join(sql.Identifier(row, c) for c in JOB_COLUMNS)
    )
