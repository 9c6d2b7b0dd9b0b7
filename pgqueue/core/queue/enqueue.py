"""The statements that write jobs: one, unique, within a unique window, and batches.

Every insert announces its job on the table's channel in the same
statement; the notification is delivered when the caller's transaction
commits, never before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from psycopg import sql

from ..jobs import DuplicateJob, ValidatedSpec
from ..plans import Copy, Operation, Plan, Query
from ..schema.names import TableNames
from ..schema.predicates import UNIQUE_PREDICATES
from ..specs import SpecLike, validate_specs
from ..tracing import Trace, enqueue_many_trace, enqueue_trace
from .depends import (
    DependencyStatements,
    check_dependencies,
    insert_dependent,
    insert_dependents,
)
from .limits import LimitStatements
from .table import FeatureStatements, Table

__all__ = [
    "COPY_THRESHOLD",
    "EnqueueStatements",
    "copy_text",
    "enqueue_many",
    "enqueue_one",
    "insert_one",
]


@dataclass(frozen=True, slots=True)
class EnqueueStatements(FeatureStatements):
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
    def special(cls, t: Table) -> dict[str, Any]:
        return {
            "unique_inserts": {
                (scope, replacing): t.render(
                    UNIQUE_INSERT,
                    scope=sql.Literal(scope),
                    predicate=sql.SQL(predicate),
                    action=t.compose(REPLACE if replacing else "DO NOTHING"),
                )
                for scope, predicate in UNIQUE_PREDICATES.items()
                for replacing in (False, True)
            },
            "unique_holders": {
                scope: t.render(UNIQUE_HOLDER, predicate=sql.SQL(predicate))
                for scope, predicate in UNIQUE_PREDICATES.items()
            },
        }


# How often an enqueue of a unique job tries again when the job holding its
# key left the key's scope between the insert and the look-up (it started,
# or ended): each time, the insert is tried anew.
UNIQUE_TRIES = 5

# Batches of at least this many jobs are written with COPY rather than INSERT.
COPY_THRESHOLD = 200
# ... and so are smaller ones whose payloads (JSON text) weigh more than this:
# INSERT sends them as one array parameter, and neither a parameter nor a
# message may pass 1 GB (the server refuses the statement, or drops the
# connection); COPY sends and parses one row at a time.
COPY_PAYLOAD_BYTES = 2**28

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


def enqueue_one(
    s: EnqueueStatements,
    limits: LimitStatements,
    names: TableNames,
    spec: ValidatedSpec,
    deps: DependencyStatements,
) -> Operation[int]:
    """The enqueue of one validated job, traced."""
    trace = enqueue_trace(names.table_name, spec.kind, spec.queue)
    plan = _enqueue_traced(s, limits, names, spec, deps, trace)
    atomic = spec.limit_key is not None or bool(spec.depends_on)
    return Operation(plan, atomic=atomic, trace=trace)


def _enqueue_traced(
    s: EnqueueStatements,
    limits: LimitStatements,
    names: TableNames,
    spec: ValidatedSpec,
    deps: DependencyStatements,
    trace: Trace,
) -> Plan[int]:
    if spec.depends_on:
        yield from check_dependencies(deps, names, list(spec.depends_on))
    job_id = yield from insert_one(s, limits, names, spec, trace.context, deps)
    trace.enqueued((job_id,))
    return job_id


def insert_one(
    s: EnqueueStatements,
    limits: LimitStatements,
    names: TableNames,
    spec: ValidatedSpec,
    trace_context: str | None,
    deps: DependencyStatements | None = None,
) -> Plan[int]:
    """Write one validated job (its dependencies checked already, if any)."""
    params = spec.row_params(trace_context, names.channel)
    if spec.limit_key is not None:
        yield Query(limits.ensure_slots, {"keys": [spec.limit_key]})
    if spec.depends_on and deps is not None:
        return (yield from insert_dependent(deps, names, spec, trace_context))
    rule = spec.unique
    if rule is None:
        rows = yield Query(s.enqueue, params)
        return int(rows[0][0])
    params["unique_key"] = rule.key
    if rule.window is not None:
        # The table's name as pg_get_serial_sequence reads it: quoted.
        params.update(window=rule.window, table=names.regclass)
        insert, holder = s.window_insert, s.window_holder
    else:
        insert = s.unique_inserts[rule.scope, rule.on_duplicate == "replace"]
        holder = s.unique_holders[rule.scope]
    for _ in range(UNIQUE_TRIES):
        rows = yield Query(insert, params)
        if rows:
            return int(rows[0][0])  # new, or the waiting holder replaced
        # Taken: by whom? A fresh statement sees a holder that committed
        # while the insert waited for it.
        rows = yield Query(holder, params)
        if not rows:
            continue  # the holder started or ended meanwhile: try again
        existing = int(rows[0][0])
        if rule.on_duplicate == "raise":
            raise DuplicateJob(rule.key, existing)
        if rule.on_duplicate == "replace" and rule.window is not None:
            yield Query(s.window_replace, {**params, "existing": existing})
        return existing
    raise RuntimeError(
        f"unique key {rule.key!r} changed hands {UNIQUE_TRIES} times during one enqueue"
    )


def enqueue_many(
    s: EnqueueStatements,
    limits: LimitStatements,
    names: TableNames,
    specs: Iterable[SpecLike],
    deps: DependencyStatements,
) -> Operation[list[int]]:
    checked = validate_specs(specs)
    # One span for the batch, whatever its size; its context on every job.
    trace = enqueue_many_trace(names.table_name, len(checked))

    def plan() -> Plan[list[int]]:
        if not checked:
            return []
        context = trace.context
        # Every dependency of the batch is checked before anything is written.
        waited = sorted({i for spec in checked for i in spec.depends_on})
        yield from check_dependencies(deps, names, waited)
        # Unique jobs go one by one, each with its rule; jobs that depend on
        # others together (`insert_dependents`); the rest together (COPY
        # when many).
        plain = [spec for spec in checked if spec.unique is None and not spec.depends_on]
        keys = sorted({spec.limit_key for spec in checked if spec.limit_key is not None})
        if keys:
            yield Query(limits.ensure_slots, {"keys": keys})
        ids: list[int] = []
        if plain:
            ids = yield from _insert_plain(s, names, plain, context)
        plain_ids = iter(ids)
        out = [
            next(plain_ids) if spec.unique is None and not spec.depends_on else 0
            for spec in checked
        ]
        waiting = [n for n, spec in enumerate(checked) if spec.depends_on]
        if waiting:
            # Jobs that depend on others: together, in one more statement.
            specs = [checked[n] for n in waiting]
            rows = yield Query(s.allocate_ids, (names.regclass, len(specs)))
            db_now, given = rows[0]
            given.sort()
            yield from insert_dependents(deps, names, specs, given, db_now, context)
            for n, job_id in zip(waiting, given, strict=True):
                out[n] = job_id
        # Unique jobs in the order of their keys, whatever the batch's order:
        # batches that share keys wait for each other's keys in one order,
        # and so never deadlock. Equal keys keep their order.
        keyed = sorted(
            (spec.unique.key, spec.unique.stored_scope, n)
            for n, spec in enumerate(checked)
            if spec.unique is not None
        )
        for _, _, n in keyed:
            out[n] = yield from insert_one(s, limits, names, checked[n], context)
        trace.enqueued(out)
        return out

    return Operation(plan(), atomic=True, trace=trace)


def _insert_plain(
    s: EnqueueStatements, names: TableNames, plain: list[ValidatedSpec], context: str | None
) -> Plan[list[int]]:
    """Write jobs without a unique key together (COPY or one INSERT), one
    notification per kind; their ids, in the order of `plain`."""
    rows = yield Query(s.allocate_ids, (names.regclass, len(plain)))
    db_now, ids = rows[0]
    ids.sort()
    # run_at from the database's clock, so that a skewed client neither runs
    # jobs early nor holds them back.
    records = [
        (i, d.kind, d.payload_json, d.run_at or db_now + d.delay, d.max_attempts,
         d.queue, d.priority, d.result_ttl, d.limit_key)
        for i, d in zip(ids, plain, strict=True)
    ]  # fmt: skip
    if len(records) >= COPY_THRESHOLD or _too_heavy_for_arrays(plain):
        copy = s.copy_in if context is None else s.copy_in_traced
        yield Copy(copy, copy_text(records, context))
    else:
        columns = [list(col) for col in zip(*records, strict=True)]
        yield Query(s.insert_arrays, [context, *columns])
    kinds = sorted({d.kind for d in plain})
    yield Query(s.notify_kinds, (names.channel, kinds))
    return list(ids)


def _too_heavy_for_arrays(specs: Sequence[ValidatedSpec]) -> bool:
    """Whether a small batch's payloads are too big to travel as one array."""
    return sum(len(s.payload_json) for s in specs) > COPY_PAYLOAD_BYTES


# COPY's text format: these four characters are written as escapes.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def copy_text(
    records: Iterable[tuple[int, str, str, datetime, int, str, int, timedelta | None, str | None]],
    trace_context: str | None = None,
) -> bytes:
    """Rows of `INSERT_COLUMNS` (id, kind, payload JSON, run_at, max_attempts,
    queue, priority, result_ttl, limit_key) in COPY's text format; with a
    ``trace_context``, each row ends with it (for `Statements.copy_in_traced`).

    Formatting here, in one pass, costs a fraction of psycopg's per-row
    ``write_row`` for the simple types of a job. A batch repeats a few kinds
    and run_at values many times: each is escaped or formatted once.
    """
    texts: dict[str, str] = {}  # kinds and queue names, escaped
    times: dict[datetime, str] = {}
    lines = []
    end = "\n" if trace_context is None else f"\t{trace_context.translate(_COPY_ESCAPES)}\n"
    for job_id, kind, payload, run_at, max_attempts, queue, priority, ttl, key in records:
        k = texts.get(kind)
        if k is None:
            k = texts[kind] = kind.translate(_COPY_ESCAPES)
        q = texts.get(queue)
        if q is None:
            q = texts[queue] = queue.translate(_COPY_ESCAPES)
        t = times.get(run_at)
        if t is None:
            t = times[run_at] = run_at.isoformat()
        # JSON text has no raw tab, newline or carriage return: only backslashes to double.
        p = payload.replace("\\", "\\\\")
        r = "\\N" if ttl is None else f"{ttl.total_seconds()} seconds"
        lk = "\\N" if key is None else texts.get(key)
        if lk is None:
            assert key is not None
            lk = texts[key] = key.translate(_COPY_ESCAPES)
        lines.append(f"{job_id}\t{k}\t{p}\t{t}\t{max_attempts}\t{q}\t{priority}\t{r}\t{lk}{end}")
    return "".join(lines).encode()
