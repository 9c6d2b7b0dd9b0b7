"""The statements that write jobs: one, unique, within a unique window, and batches.

Every insert announces its job on the table's channel in the same
statement; the notification is delivered when the caller's transaction
commits, never before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from psycopg import sql

from ..schema.predicates import UNIQUE_PREDICATES
from .table import Table

__all__ = ["EnqueueStatements"]

ENQUEUE: Final = """
WITH job AS (
    INSERT INTO {table} (kind, payload, run_at, max_attempts, queue, priority, result_ttl,
                         limit_key, trace_context)
    VALUES (%(kind)s, %(payload)s::jsonb,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(queue)s, %(priority)s, %(result_ttl)s::interval, %(limit_key)s,
            %(trace_context)s)
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job"""

# -- unique jobs (docs/unique.md) -------------------------------------------
#
# At most one job per key in a scope, held by a partial unique index
# (migration 7). INSERT ... ON CONFLICT waits for a concurrent inserter of
# the same key, and goes on if that one rolls back.
UNIQUE_INSERT: Final = """
WITH job AS (
    INSERT INTO {table} (kind, payload, run_at, max_attempts, queue, priority,
                         unique_key, unique_scope, result_ttl, limit_key, trace_context)
    VALUES (%(kind)s, %(payload)s::jsonb,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(queue)s, %(priority)s, %(unique_key)s, {scope}, %(result_ttl)s::interval,
            %(limit_key)s, %(trace_context)s)
    ON CONFLICT (unique_key) WHERE {predicate} {action}
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job"""
# "replace" changes what the waiting job will do and when, not a started one;
# its run now belongs to the trace of the enqueue that replaced it.
REPLACE: Final = """DO UPDATE SET payload = EXCLUDED.payload, run_at = EXCLUDED.run_at,
                  trace_context = EXCLUDED.trace_context
     WHERE {table}.status = 'pending'"""
UNIQUE_HOLDER: Final = "SELECT id FROM {table} WHERE unique_key = %(unique_key)s AND {predicate}"

# unique_for: the key is leased for a window (a small table, since a job that
# succeeds is deleted); the lease and the job are written by one statement,
# and an expired lease is taken over.
WINDOW_INSERT: Final = """
WITH lease AS (
    INSERT INTO {leases} AS l (unique_key, job_id, expires_at)
    VALUES (%(unique_key)s, nextval(pg_get_serial_sequence(%(table)s, 'id')::regclass),
            now() + %(window)s::interval)
    ON CONFLICT (unique_key) DO UPDATE
       SET job_id = EXCLUDED.job_id, expires_at = EXCLUDED.expires_at
     WHERE l.expires_at <= now()
    RETURNING job_id
), job AS (
    INSERT INTO {table} (id, kind, payload, run_at, max_attempts, queue, priority,
                         unique_key, unique_scope, result_ttl, limit_key, trace_context)
    SELECT job_id, %(kind)s, %(payload)s::jsonb,
           COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
           %(queue)s, %(priority)s, %(unique_key)s, 'window', %(result_ttl)s::interval,
           %(limit_key)s, %(trace_context)s
      FROM lease
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job"""
WINDOW_HOLDER: Final = (
    "SELECT job_id FROM {leases} WHERE unique_key = %(unique_key)s AND expires_at > now()"
)
# "replace" within a window: the holder, if it is still waiting.
WINDOW_REPLACE: Final = """
WITH job AS (
    UPDATE {table}
       SET payload = %(payload)s::jsonb,
           run_at = COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval),
           trace_context = %(trace_context)s
     WHERE id = %(existing)s AND status = 'pending'
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job"""

# -- enqueue_many -------------------------------------------------------------
#
# Step 1: the transaction's clock and the ids to use. Ids are allocated up
# front so that COPY, which returns nothing, can write them, and so that ids
# follow the order of the specs.
ALLOCATE_IDS: Final = """
SELECT now(), array(SELECT nextval((SELECT pg_get_serial_sequence(%s, 'id')::regclass))
                      FROM generate_series(1, %s))"""
# Step 2 for small batches: one INSERT from arrays, and the batch's trace
# context (or NULL) for every row.
INSERT_ARRAYS: Final = """
INSERT INTO {table} ({insert_cols}, trace_context)
SELECT *, %s::text FROM unnest(%s::bigint[], %s::text[], %s::jsonb[], %s::timestamptz[],
                               %s::integer[], %s::text[], %s::smallint[], %s::interval[],
                               %s::text[])"""
# Step 2 for large batches; with a trace context, one more column (`copy_text`).
COPY_IN: Final = "COPY {table} ({insert_cols}) FROM STDIN"
COPY_IN_TRACED: Final = "COPY {table} ({insert_cols}, trace_context) FROM STDIN"
# Step 3: one notification per kind, not per row.
NOTIFY_KINDS: Final = b"SELECT pg_notify(%s, k)::text FROM unnest(%s::text[]) AS k"


@dataclass(frozen=True, slots=True)
class EnqueueStatements:
    enqueue: bytes
    # (scope, replace) -> the insert; and scope -> the holder of a key.
    unique_inserts: dict[tuple[str, bool], bytes]
    unique_holders: dict[str, bytes]
    window_insert: bytes
    window_holder: bytes
    window_replace: bytes
    allocate_ids: bytes
    insert_arrays: bytes
    copy_in: bytes
    copy_in_traced: bytes
    notify_kinds: bytes

    @classmethod
    def of(cls, t: Table) -> EnqueueStatements:
        return cls(
            enqueue=t.render(ENQUEUE),
            unique_inserts={
                (scope, replacing): t.render(
                    UNIQUE_INSERT,
                    scope=sql.Literal(scope),
                    predicate=sql.SQL(predicate),
                    action=t.compose(REPLACE if replacing else "DO NOTHING"),
                )
                for scope, predicate in UNIQUE_PREDICATES.items()
                for replacing in (False, True)
            },
            unique_holders={
                scope: t.render(UNIQUE_HOLDER, predicate=sql.SQL(predicate))
                for scope, predicate in UNIQUE_PREDICATES.items()
            },
            window_insert=t.render(WINDOW_INSERT),
            window_holder=t.render(WINDOW_HOLDER),
            window_replace=t.render(WINDOW_REPLACE),
            allocate_ids=t.render(ALLOCATE_IDS),
            insert_arrays=t.render(INSERT_ARRAYS),
            copy_in=t.render(COPY_IN),
            copy_in_traced=t.render(COPY_IN_TRACED),
            notify_kinds=NOTIFY_KINDS,
        )
