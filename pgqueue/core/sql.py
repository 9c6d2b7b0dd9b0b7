"""Every SQL statement pgqueue runs on a queue table, built once per table.

The schema itself (DDL) is in `pgqueue.core.migrations`.

Identifiers are validated (`validate_table_name`) and quoted with
`psycopg.sql`; values always travel as parameters. Statements are
rendered to bytes when a `Statements` is built, so the hot path neither
composes nor escapes anything, and psycopg can prepare them by text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Final

from psycopg import sql

from .jobs import LEASE_EXPIRED, MAX_IDENTIFIER_LENGTH, validate_table_name

__all__ = ["JOB_COLUMNS", "ORPHANED", "UNIQUE_PREDICATES", "Statements"]

# An orphaned job (`Job.orphaned`): its worker vanished holding it. The same
# expression is the predicate of the ``<table>_orphans`` index (migration 5),
# so that the claim of an orphan reads that small index.
ORPHANED: Final = sql.SQL("starts_with(last_error, {})").format(sql.Literal(LEASE_EXPIRED))

# The predicates of the unique indexes (migration 7), by scope. A job leaves
# its predicate for good when it starts ("queued") or ends ("active").
UNIQUE_PREDICATES: Final = {
    "queued": "unique_scope = 'queued' AND status = 'pending' AND attempts = 0",
    "active": "unique_scope = 'active' AND status IN ('pending', 'running')",
}

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
)
# Columns read as an expression (`Job` takes plain values): the rest are read as they are.
_READ_AS: Final = {
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
_LEAVING: Final = ("attempts", "kind", "queue", "limit_key", "result_ttl", "last_error")

RELOAD_CONF: Final = b"SELECT pg_reload_conf()"
# What ``pgqueue bench`` reads around a run: the WAL written (bytes) and the
# transactions committed on the database.
WAL_WRITTEN: Final = b"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint"
COMMITS: Final = b"SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"


def alter_system(name: str, value: str) -> bytes:
    """``ALTER SYSTEM SET name = 'value'``, for the embedded server's settings."""
    return sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), value).as_bytes(None)


def _render(template: str, **parts: sql.Composable) -> bytes:
    return sql.SQL(template).format(**parts).as_bytes(None)


def _history_copy(history: sql.Identifier | None, source: str, outcome: str) -> sql.Composable:
    """A CTE that copies the rows of CTE `source` into the history table (or nothing).

    Appended after `source` in a ``WITH``: the copy is written by the same
    statement as the delete, so a job is never in both tables or in neither.
    """
    if history is None:
        return sql.SQL("")
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in HISTORY_COLUMNS)
    return sql.SQL(
        ",\n{kept} AS (INSERT INTO {history} ({cols}, outcome)"
        " SELECT {cols}, {outcome} FROM {source})"
    ).format(
        kept=sql.Identifier(f"{source}_kept"),
        history=history,
        cols=cols,
        outcome=sql.Literal(outcome),
        source=sql.Identifier(source),
    )


def _read(prefix: str = "") -> sql.Composable:
    """`JOB_COLUMNS` as a select list (of the row ``prefix``, if given)."""
    row = f"{prefix}." if prefix else ""
    return sql.SQL(", ").join(
        sql.SQL(_READ_AS[c].format(row) + " AS {}").format(sql.Identifier(c))
        if c in _READ_AS
        else (sql.Identifier(prefix, c) if prefix else sql.Identifier(c))
        for c in JOB_COLUMNS
    )


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


class Statements:
    """The statements for one queue table.

    >>> Statements("app.jobs").table_name
    'app.jobs'
    """

    def __init__(self, table: str, *, history: bool = False) -> None:
        parts = validate_table_name(table)
        self.table_name = table
        self.history = history
        self.channel = notification_channel(table)
        # Cancel requests for running jobs (payload: their ids), heard by
        # workers beside `channel` but waking no claim; and results kept
        # (payload: the job's id), heard by `wait`.
        self.control_channel = notification_channel(f"{table}:control")
        self.results_channel = notification_channel(f"{table}:results")
        name = parts[-1]
        t = sql.Identifier(*parts)
        history_table = sql.Identifier(*parts[:-1], f"{name}_history")
        cols = _read()
        jcols = _read("j")
        names = {
            "table": t,
            "cols": cols,
            "jcols": jcols,
            "insert_cols": sql.SQL(", ").join(sql.Identifier(c) for c in INSERT_COLUMNS),
            "history": history_table,
            "queues": sql.Identifier(*parts[:-1], f"{name}_queues"),
            "leases": sql.Identifier(*parts[:-1], f"{name}_unique_leases"),
            "schedules": sql.Identifier(*parts[:-1], f"{name}_schedules"),
            "results": sql.Identifier(*parts[:-1], f"{name}_results"),
            "limits": sql.Identifier(*parts[:-1], f"{name}_limits"),
            "slots": sql.Identifier(*parts[:-1], f"{name}_limit_slots"),
            "results_channel": sql.Literal(self.results_channel),
            "jobs_channel": sql.Literal(self.channel),
        }
        # Jobs that leave the table are copied here when history is on.
        keep = history_table if history else None
        # What a delete returns: the ids, and what the history copies.
        names["gone"] = sql.SQL(", ").join(
            sql.Identifier(c) for c in (HISTORY_COLUMNS if history else ("id",))
        )
        gone_cols = HISTORY_COLUMNS if history else ("id",)
        leaving_cols = gone_cols + tuple(c for c in _LEAVING if c not in gone_cols)
        names["leaving"] = sql.SQL(", ").join(sql.Identifier(c) for c in leaving_cols)
        names["leaving_j"] = sql.SQL(", ").join(sql.SQL(f"j.{c}") for c in leaving_cols)
        # The same, for a job whose worker reported why it ended (failures):
        # the reason is what history and results keep.
        names["leaving_f"] = sql.SQL(", ").join(
            sql.SQL(f"j.{c}") for c in leaving_cols if c != "last_error"
        ) + sql.SQL(",\n              COALESCE(f.error, j.last_error) AS last_error")
        self.claim_index_name = f"{name}_unlimited"
        # The claim index, as a regclass literal: the turn reports how many
        # of its entries the transaction read (`pgqueue.core.heads`).
        names["unlimited_index"] = sql.Literal(
            sql.Identifier(*parts[:-1], self.claim_index_name).as_string(None)
        )

        # One job, announced in the same statement; the notification is
        # delivered when the caller's transaction commits, never before.
        self.enqueue = _render(
            """
WITH job AS (
    INSERT INTO {table} (kind, payload, run_at, max_attempts, queue, priority, result_ttl,
                         limit_key, trace_context)
    VALUES (%(kind)s, %(payload)s::jsonb,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(queue)s, %(priority)s, %(result_ttl)s::interval, %(limit_key)s,
            %(trace_context)s)
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job""",
            **names,
        )

        # -- unique jobs (docs/unique.md) -----------------------------------
        #
        # At most one job per key in a scope, held by a partial unique index
        # (migration 7). INSERT ... ON CONFLICT waits for a concurrent
        # inserter of the same key, and goes on if that one rolls back.
        unique_insert = """
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
        replace = """DO UPDATE SET payload = EXCLUDED.payload, run_at = EXCLUDED.run_at,
                  trace_context = EXCLUDED.trace_context
     WHERE {table}.status = 'pending'"""
        # (scope, replace) -> the insert; and scope -> the holder of a key.
        self.unique_inserts: dict[tuple[str, bool], bytes] = {}
        self.unique_holders: dict[str, bytes] = {}
        for scope, predicate in UNIQUE_PREDICATES.items():
            for replacing in (False, True):
                self.unique_inserts[scope, replacing] = _render(
                    unique_insert,
                    scope=sql.Literal(scope),
                    predicate=sql.SQL(predicate),
                    action=sql.SQL(replace if replacing else "DO NOTHING").format(**names),
                    **names,
                )
            self.unique_holders[scope] = _render(
                "SELECT id FROM {table} WHERE unique_key = %(unique_key)s AND {predicate}",
                predicate=sql.SQL(predicate),
                **names,
            )
        # unique_for: the key is leased for a window (a small table, since a
        # job that succeeds is deleted); the lease and the job are written
        # by one statement, and an expired lease is taken over.
        self.window_insert = _render(
            """
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
SELECT id, pg_notify(%(channel)s, kind)::text FROM job""",
            **names,
        )
        self.window_holder = _render(
            "SELECT job_id FROM {leases} WHERE unique_key = %(unique_key)s AND expires_at > now()",
            **names,
        )
        # "replace" within a window: the holder, if it is still waiting.
        self.window_replace = _render(
            """
WITH job AS (
    UPDATE {table}
       SET payload = %(payload)s::jsonb,
           run_at = COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval),
           trace_context = %(trace_context)s
     WHERE id = %(existing)s AND status = 'pending'
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job""",
            **names,
        )
        # Leases past their window, removed by the reaper.
        self.prune_leases = _render(
            "DELETE FROM {leases} WHERE expires_at <= now() - interval '1 minute'", **names
        )

        # enqueue_many, step 1: the transaction's clock and the ids to use.
        # Ids are allocated up front so that COPY, which returns nothing,
        # can write them, and so that ids follow the order of the specs.
        self.allocate_ids = _render(
            """
SELECT now(), array(SELECT nextval((SELECT pg_get_serial_sequence(%s, 'id')::regclass))
                      FROM generate_series(1, %s))""",
        )
        # enqueue_many, step 2 for small batches: one INSERT from arrays, and
        # the batch's trace context (or NULL) for every row.
        self.insert_arrays = _render(
            """
INSERT INTO {table} ({insert_cols}, trace_context)
SELECT *, %s::text FROM unnest(%s::bigint[], %s::text[], %s::jsonb[], %s::timestamptz[],
                               %s::integer[], %s::text[], %s::smallint[], %s::interval[],
                               %s::text[])""",
            **names,
        )
        # enqueue_many, step 2 for large batches; with a trace context, one
        # more column (`copy_text`).
        self.copy_in = _render("COPY {table} ({insert_cols}) FROM STDIN", **names)
        self.copy_in_traced = _render(
            "COPY {table} ({insert_cols}, trace_context) FROM STDIN", **names
        )
        # enqueue_many, step 3: one notification per kind, not per row.
        self.notify_kinds = _render("SELECT pg_notify(%s, k)::text FROM unnest(%s::text[]) AS k")

        # -- the claim ----------------------------------------------------
        #
        # Select, lock, mark and return in one statement. A claim serves
        # some queues (those given, or every queue with pending jobs), less
        # the paused ones; takes higher priorities first; and within a
        # priority, the jobs due first. It reads the claim index (migration
        # 7: queue, priority, run_at, id) level by level, so that it reads
        # O(batch) entries whatever else the table holds:
        #
        # 1. the (queue, priority) levels with pending jobs, by a loose index
        #    scan: one probe per queue and per level (`max(priority)` below a
        #    level is the index's next level down);
        # 2. the levels' priorities, highest first; for each, every level of
        #    that priority is read from its due end (`run_at <= now()`, so a
        #    level of jobs due tomorrow costs one probe), locked as read, and
        #    the earliest due of them taken. A priority whose levels hold the
        #    whole batch ends the walk: lower ones are never read.
        #
        # With `kinds`, each level is read once per kind, so that a kind the
        # worker serves is found by an index range rather than by filtering
        # past other kinds; fast only with the kinds index (see
        # docs/queues.md), which install() does not build: it would slow
        # every write.
        every_queue = """
found(queue) AS (
    SELECT min(queue) FROM {table} WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM {table}
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL)"""
        given_queues = """
found(queue) AS (SELECT unnest(%(queues)s::text[]))"""
        # A worker's claim may be given heads (`pgqueue.core.heads`, a JSON
        # array: the planner guesses as many rows of it whatever it holds,
        # so that the statement's generic plan costs what its custom plans
        # do and is kept; from arrays, unnest's row estimate followed the
        # values, and every turn was planned anew, 1.5 ms). For a
        # level, the (run_at, id) of the last job it claimed there. Entries
        # of the level up to its head are taken as gone (under a held
        # snapshot they are dead entries, which every probe would otherwise
        # step over one by one): the pick starts after the head, and the
        # walks below never step into those entries; a level with a head
        # is a level, whether or not a live job is left in it. A turn sent
        # without heads leaves all of this out: its claim is the one above.
        heads_cte = """
heads(queue, priority, run_at, id) AS (
    SELECT * FROM jsonb_to_recordset(%(heads)s::jsonb)
        AS h(queue text, priority smallint, run_at timestamptz, id bigint)),"""
        # The queues with pending jobs, each probe bounded by the next
        # queue's first head (before: that head's level and all above it).
        every_queue_after_heads = """
found(queue) AS (
    SELECT {first_queue}
      FROM (SELECT (SELECT h.queue FROM heads AS h
                     ORDER BY h.queue, h.priority LIMIT 1) AS queue,
                   (SELECT h.priority FROM heads AS h
                     ORDER BY h.queue, h.priority LIMIT 1) AS priority) AS z
  UNION ALL
    SELECT {next_queue}
      FROM found AS f
      LEFT JOIN LATERAL (SELECT h.queue, h.priority FROM heads AS h WHERE h.queue > f.queue
                          ORDER BY h.queue, h.priority LIMIT 1) AS z ON true
     WHERE f.queue IS NOT NULL)"""
        queue_probe = """CASE WHEN z.queue IS NULL THEN
           (SELECT min(queue) FROM {table}
             WHERE status = 'pending' AND limit_key IS NULL{after})
         ELSE coalesce(
           (SELECT min(queue) FROM {table}
             WHERE status = 'pending' AND limit_key IS NULL{after}
               AND (queue, priority) < (z.queue, z.priority)),
           z.queue) END"""
        # Each queue's levels, highest first, each probe bounded below by
        # the head of the next level down that has one.
        levels_after_heads = """
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM {queues} AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT l.queue, {next_level}
      FROM (SELECT queue, 32767::smallint AS priority FROM served) AS l{head_below}
  UNION ALL
    SELECT l.queue, {next_level}
      FROM levels AS l{head_below}
     WHERE l.priority IS NOT NULL)"""
        head_below = """
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true"""
        next_level = """coalesce(
           (SELECT max(priority) FROM {table}
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)"""
        levels = """
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM {queues} AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM {table}
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM {table}
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL)"""
        # The batch: (priority, run_at, id, size) of each job taken, in claim order.
        pick = """
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l{level_head}{per_kind}
            CROSS JOIN LATERAL (
                  SELECT run_at, id, {size} AS size FROM {table}
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority{after_head}
                     AND run_at <= now(){kind_filter}{orphans}
                   ORDER BY run_at, id
                   LIMIT {limit}
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT {limit}) AS x
     LIMIT {limit})"""
        # A level's head, for the pick (none: from the level's start).
        level_head = """
             LEFT JOIN heads AS h ON h.queue = l.queue AND h.priority = l.priority"""
        after_head = """
                     AND (run_at, id) > (coalesce(h.run_at, '-infinity'::timestamptz),
                                         coalesce(h.id, 0::bigint))"""
        # A worker's batch may stop at the job whose payload would take it
        # past %(claim_bytes)s (stored size; the first job always comes):
        # the worker holds about six times its batch's payloads in memory.
        # Small uncompressed payloads: their stored size. Others: their size
        # as text, which is what the worker receives.
        payload_size = sql.SQL(
            "CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL"
            " THEN pg_column_size(payload) ELSE octet_length(payload::text) END"
        )
        within_budget = """SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s"""
        # Jobs held back by a limit (docs/limits.md) are not in the claim
        # index: they are claimed by their key, one per free slot of it.
        # Free slots are locked SKIP LOCKED, as the jobs are, so that two
        # claims never take one slot, and the slot records the job and the
        # attempt it is taken for: the statement that records that attempt's
        # outcome frees it, and no other can. A key with no limit set runs
        # one job at a time. These CTEs come first in a claim's WITH (a
        # data-modifying CTE must be at the top); with no limits in use they
        # read one empty index.
        #
        # A key with a rate (`set_rate`) has a token bucket in its limits
        # row, refilled at `per_second` up to `burst`: a claim locks the
        # buckets of the keys it may serve (SKIP LOCKED: a key whose bucket
        # another claim holds is that claim's to serve), takes at most as
        # many jobs as whole tokens, and writes back what is left (`spent`).
        # FOR UPDATE reads a bucket as last committed, whatever the
        # statement's snapshot: two claims never spend one token.
        limited = """
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM {limits} AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM {table} AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now(){served}
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM {slots} AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM {limits} AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM {slots} AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM {limits} AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM {table} AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now(){served}
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM {limits} AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT {limit}
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM {table} AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now(){served}
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE {slots} AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE {limits} AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens)"""
        # Which limited jobs a claim serves (t: a job row).
        served_queues = """
                              AND NOT EXISTS (SELECT FROM {queues} AS q
                                               WHERE q.queue = t.queue AND q.paused)"""
        # The claim proper: limited jobs first, then the rest of the batch.
        # While no limit is in use (no slot exists), a worker's turn leaves
        # the limited part out: a claim of jobs without a limit key is then
        # what it was before limits existed (`QueueCore.limits_in_use`).
        claim = """
UPDATE {table} AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY({limited_ids}ARRAY(
WITH RECURSIVE{heads}{found},{levels},{pick}
{take}{rest}))
RETURNING {jcols}"""
        no_orphans = sql.SQL("\n                     AND NOT coalesce({}, false)").format(ORPHANED)

        def served_by(queues: bool, kinds: bool) -> sql.Composable:
            served = sql.SQL(served_queues).format(**names)
            if queues:
                served += sql.SQL(" AND t.queue = ANY(%(queues)s::text[])")
            if kinds:
                served += sql.SQL(" AND t.kind = ANY(%(kinds)s::text[])")
            return served

        def claim_parts(
            queues: bool,
            kinds: bool,
            limit: int,
            budget: bool = False,
            worker: bool = False,
            limited_jobs: bool = True,
            limited_max: int | None = None,
            handed: bool = False,
            heads: bool = False,
        ) -> tuple[sql.Composable, sql.Composable]:
            """The claim's CTEs of limited jobs (none without `limited_jobs`),
            and its UPDATE; a worker's (`worker`) leaves orphaned jobs out of
            its batches. With `handed`, it claims the jobs that the turn's
            successes handed their slots to (`freeing`) too."""
            served = served_by(queues, kinds)
            most = limit if limited_max is None else limited_max
            ctes = sql.SQL(limited).format(served=served, limit=sql.Literal(most), **names)
            picked = sql.SQL(pick).format(
                limit=sql.Literal(limit),
                per_kind=sql.SQL(
                    " CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)" if kinds else ""
                ),
                kind_filter=sql.SQL(" AND kind = k.kind" if kinds else ""),
                orphans=no_orphans if worker else sql.SQL(""),
                level_head=sql.SQL(level_head if heads else ""),
                after_head=sql.SQL(after_head if heads else ""),
                size=payload_size if budget else sql.SQL("0"),
                **names,
            )
            if heads:
                found = sql.SQL(given_queues if queues else every_queue_after_heads).format(
                    first_queue=sql.SQL(queue_probe).format(after=sql.SQL(""), **names),
                    next_queue=sql.SQL(queue_probe).format(
                        after=sql.SQL("\n               AND queue > f.queue"), **names
                    ),
                )
                walk = sql.SQL(levels_after_heads).format(
                    next_level=sql.SQL(next_level).format(**names),
                    head_below=sql.SQL(head_below),
                    **names,
                )
            else:
                found = sql.SQL(given_queues if queues else every_queue).format(**names)
                walk = sql.SQL(levels).format(**names)
            update = sql.SQL(claim).format(
                heads=sql.SQL(heads_cte if heads else ""),
                found=found,
                levels=walk,
                pick=picked,
                take=sql.SQL(within_budget if budget else "SELECT id FROM picked"),
                limited_ids=sql.SQL(
                    "ARRAY(SELECT id FROM limited) || "
                    + ("ARRAY(SELECT id FROM done_handed) || " if handed else "")
                    if limited_jobs
                    else ""
                ),
                rest=sql.SQL(
                    (
                        "\n LIMIT greatest(0, {} - (SELECT count(*) FROM limited)"
                        " - (SELECT count(*) FROM done_handed))"
                        if handed
                        else "\n LIMIT {} - (SELECT count(*) FROM limited)"
                    )
                    if limited_jobs
                    else ""
                ).format(sql.Literal(limit)),
                **names,
            )
            return (ctes if limited_jobs else sql.SQL("")), update

        def claim_statement(
            queues: bool, kinds: bool, limit: int, limited: bool = True
        ) -> sql.Composable:
            ctes, update = claim_parts(queues, kinds, limit, limited_jobs=limited)
            return sql.SQL("WITH{}{}").format(ctes, update) if limited else update

        # The batch size is written into the statement, not passed: with a
        # parameter, PostgreSQL planned the claim anew at every execution
        # (its generic plan, blind to the LIMIT, looked dearer), and planning
        # took as long as the claim itself (docs/performance.md). Written
        # in, the statement is planned once per connection and batch size.
        self._claim_statement = claim_statement
        self._claim_parts = claim_parts
        self._rendered: dict[tuple[object, ...], bytes] = {}

        # An orphaned job (`Job.orphaned`) runs alone, claimed by itself when
        # the worker has nothing else; the worker's batches leave them out.
        # Orphans are few: they are found through their own small index.
        orphan = """
UPDATE {table} AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id IN (
       SELECT id FROM {table} AS o
        WHERE status = 'pending' AND run_at <= now() AND {orphaned} AND limit_key IS NULL
              {queue_filter} {kind_filter}
          AND NOT EXISTS (SELECT FROM {queues} AS q WHERE q.queue = o.queue AND q.paused)
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
RETURNING {jcols}"""
        self.orphan_claims = {
            (q, k): _render(
                orphan,
                orphaned=ORPHANED,
                queue_filter=sql.SQL("AND queue = ANY(%(queues)s::text[])" if q else ""),
                kind_filter=sql.SQL("AND kind = ANY(%(kinds)s::text[])" if k else ""),
                **names,
            )
            for q in (False, True)
            for k in (False, True)
        }

        # -- outcomes ------------------------------------------------------
        #
        # The slots that the jobs leaving (CTE `{source}`) held are freed,
        # fenced by the attempt that took them. In a worker's turn
        # (`served`: which jobs it may claim), a freed slot is handed
        # straight to the next ready job of its key, which the turn claims
        # (`{source}_handed`, read by the claim): no slot waits for a claim
        # that can see it free, and no other worker races this one for it.
        # A slot is handed within the limit only, as `free` takes one, and
        # never for a key with a rate (its tokens are the claim's to spend).
        # A limit lowered by a statement running at that very moment lets
        # the slot go once more, as a claim that began before it would.
        # The freed CTE returns each slot with its new job (NULL: free).
        def freeing(source: str, attempt: str, served: sql.Composable | None) -> sql.Composable:
            fence = sql.SQL(
                "d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id"
                "\n       AND s.attempt = d.{attempt}"
            ).format(attempt=sql.SQL(attempt))
            if served is None:
                return sql.SQL(
                    """
{freed} AS (
    UPDATE {slots} AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM {source} AS d
     WHERE {fence}
    RETURNING s.slot, s.job_id)"""
                ).format(
                    freed=sql.SQL(f"{source}_freed"), source=sql.SQL(source), fence=fence, **names
                )
            return sql.SQL(
                """
{left} AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM {slots} AS s, {source} AS d
     WHERE {fence}
       AND s.slot <= coalesce((SELECT max_running FROM {limits} AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM {slots} AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM {limits} AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM {limits} AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
{handed} AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM {left} GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM {table} AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now(){served}
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN {left} AS f ON f.limit_key = k.limit_key AND f.n = x.n),
{freed} AS (
    UPDATE {slots} AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM {handed} AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM {source} AS d
     WHERE {fence}
    RETURNING s.slot, s.job_id)"""
            ).format(
                left=sql.SQL(f"{source}_slots"),
                handed=sql.SQL(f"{source}_handed"),
                freed=sql.SQL(f"{source}_freed"),
                source=sql.SQL(source),
                fence=fence,
                served=served,
                **names,
            )

        #
        # What follows a job's leaving the table (CTE `{source}`, its rows
        # with the `leaving` columns): the slot of its limit is freed, fenced
        # by the attempt that took it; its result is kept if it asked for
        # one (result_ttl); the `results` notification is sent at the end
        # of the statement, by `told` (see below), for those kept only.
        def after_leaving(
            source: str,
            outcome: str,
            attempt: str,
            value: str = "NULL",
            error: str = "NULL",
            served: sql.Composable | None = None,
        ) -> sql.Composable:
            return sql.SQL(
                """,{freed},
{kept} AS (
    INSERT INTO {results} AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, {outcome}, {value}, {error}, d.attempts, now() + d.result_ttl
      FROM {source} AS d{join}
     WHERE d.result_ttl IS NOT NULL{only}
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id)"""
            ).format(
                source=sql.SQL(source),
                freed=freeing(source, attempt, served),
                kept=sql.SQL(f"{source}_results"),
                attempt=sql.SQL(attempt),
                outcome=sql.SQL(outcome),
                value=sql.SQL(value),
                error=sql.SQL(error),
                join=sql.SQL(values_join if value == "v.value" else ""),
                only=sql.SQL("\n       AND d.status = 'dead'" if outcome == "d.status" else ""),
                **names,
            )

        # A success's return value, as JSON text, for the jobs that keep it.
        values_join = """
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id"""

        # The notifications of a statement that records outcomes, a scalar
        # subquery of its last SELECT (so that it runs once what it announces
        # is written): a job's id on the results channel for each result
        # kept; and, if it freed limit slots, one on the jobs channel, which
        # wakes the workers (the claim of this very statement saw the slots
        # taken). Counts the notifications.
        def told(*sources: str) -> sql.Composable:
            kept = sql.SQL("\n                UNION ALL ").join(
                sql.SQL(f"SELECT job_id FROM {src}_results") for src in sources
            )
            freed = sql.SQL("\n                        UNION ALL ").join(
                sql.SQL(f"SELECT slot FROM {src}_freed WHERE job_id IS NULL") for src in sources
            )
            return sql.SQL(
                "(SELECT count(pg_notify({results_channel}, job_id::text))"
                "\n          FROM ({kept}) AS k)"
                "\n       + (SELECT count(pg_notify({jobs_channel}, ''))"
                "\n            FROM (SELECT FROM ({freed}) AS f HAVING count(*) > 0) AS w)"
            ).format(kept=kept, freed=freed, **names)

        # Success: the row goes. Only a running job can succeed. A worker's
        # successes are fenced by its name (`cycle`); `complete` is not.
        done = """
done AS (
    DELETE FROM {table}
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running'{fence}
    RETURNING {leaving}){keep}{after}"""
        after_done = after_leaving("done", "'succeeded'", "attempts", "v.value")
        keep_done = _history_copy(keep, "done", "succeeded")
        self.complete = _render(
            """
WITH{done}
SELECT (SELECT coalesce(array_agg(id), '{{}}') FROM done),
       {told}""",
            done=sql.SQL(done).format(fence=sql.SQL(""), keep=keep_done, after=after_done, **names),
            told=told("done"),
            **names,
        )

        # Failure, expiry and release for a batch of jobs, each with the next
        # state the state machine chose. The claim's attempts and locked_by
        # fence the write: a job reclaimed since (by a new claim, which bumps
        # attempts, or by another worker after a retry reset them) is left
        # alone. A job whose cancellation was requested is deleted instead,
        # whatever the worker decided: a cancelled job is never retried,
        # reaped back or buried. The table, not the worker, says which: a
        # job its worker reports cancelled without a request in the table
        # (the worker trusted a forged notification) is a plain failure,
        # pending again, or dead when it used its last attempt.
        failure_rows = """
      {verb} unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by"""
        failures = """
failed_rows AS (
    UPDATE {table} AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error){from_rows}
       AND j.cancel_requested_at IS NULL
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error){after_failed},
cancelled AS (
    DELETE FROM {table} AS j{using_rows}
       AND j.cancel_requested_at IS NOT NULL
    RETURNING {leaving_f}){keep}{after_cancelled},
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled)"""
        failure_ctes = sql.SQL(failures).format(
            from_rows=sql.SQL(failure_rows).format(verb=sql.SQL("FROM")),
            using_rows=sql.SQL(failure_rows).format(verb=sql.SQL("USING")),
            after_failed=after_leaving("failed_rows", "d.status", "claimed", error="d.last_error"),
            keep=_history_copy(keep, "cancelled", "cancelled"),
            after_cancelled=after_leaving(
                "cancelled", "'cancelled'", "attempts", error="d.last_error"
            ),
            **names,
        )
        self.record_failures = _render(
            """
WITH{failures}
SELECT (SELECT coalesce(array_agg(id), '{{}}') FROM failed),
       (SELECT coalesce(array_agg(status), '{{}}') FROM failed),
       {told}""",
            failures=failure_ctes,
            told=told("failed_rows", "cancelled"),
            **names,
        )

        # One turn of a worker in one statement: delete its successes (fenced
        # by its name), record its failures, claim its next batch. The
        # parts touch disjoint rows (running ones; pending ones), so one
        # snapshot serves them all. The worker's bookkeeping commits without
        # waiting for the WAL flush: should the server crash, the last
        # moments of it are forgotten and those jobs run again, which
        # at-least-once delivery allows. Enqueues are never relaxed.
        cycle = (
            "\nWITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),"
            "\nread AS MATERIALIZED ("
            "SELECT pg_stat_get_xact_tuples_returned({unlimited_index}::regclass) AS before),"
            "{limited}{done},{failures},"
            """
claimed AS ({claim})
SELECT (SELECT coalesce(array_agg(id), '{{}}') FROM done),
       (SELECT coalesce(array_agg(id), '{{}}') FROM failed),
       (SELECT coalesce(array_agg(status), '{{}}') FROM failed),
       (SELECT coalesce(json_agg(claimed), '[]') FROM claimed),
       {told},
       EXISTS (SELECT FROM {slots}),
       {wake},
       {left_free},
       pg_stat_get_xact_tuples_returned({unlimited_index}::regclass) - read.before
  FROM relax, read"""
        )
        worker_done = sql.SQL(done).format(
            fence=sql.SQL(" AND locked_by = %(worker)s"), keep=keep_done, after=after_done, **names
        )

        def handing_done(queues: bool, kinds: bool) -> sql.Composable:
            """A worker's successes whose slots go to the next ready job of
            their key that this worker may claim (`freeing`)."""
            after = after_leaving(
                "done", "'succeeded'", "attempts", "v.value", served=served_by(queues, kinds)
            )
            return sql.SQL(done).format(
                fence=sql.SQL(" AND locked_by = %(worker)s"), keep=keep_done, after=after, **names
            )

        # How many slots the statement's outcomes left free (none handed on):
        # a claim that can see them free may take them.
        def left_free(*sources: str) -> sql.Composable:
            freed = sql.SQL("\n                UNION ALL ").join(
                sql.SQL(f"SELECT slot FROM {src}_freed WHERE job_id IS NULL") for src in sources
            )
            return sql.SQL("(SELECT count(*) FROM ({freed}) AS f)").format(freed=freed)

        # Most turns carry successes that hold no slot and keep no result,
        # and no failure: they leave that bookkeeping out of the statement
        # (`turn`). A plain success is deleted only if it is one, so a
        # caller that was wrong loses neither a slot nor a result: the job
        # stays running, and `QueueCore.cycle` records it in full at once.
        plain_done = sql.SQL(done).format(
            fence=sql.SQL(
                " AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL"
            ),
            keep=keep_done,
            after=sql.SQL(""),
            **names,
        )
        no_failures = sql.SQL(
            "\nfailed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false)"
        )

        # The worker's turn, by shape: see `turn`. Its last columns: in how
        # many seconds a key it left jobs of for want of a token has one;
        # how many slots it left free; how many claim-index entries it read
        # (`pgqueue.core.heads`). The server counts the entries a backend
        # read since it last reported its statistics (about once a second,
        # whatever the function's name says): `read`, scanned before the
        # columns are, holds the count before the claim.
        self._worker_done = worker_done
        self._turn_parts = (
            cycle,
            handing_done,
            plain_done,
            failure_ctes,
            no_failures,
            told,
            left_free,
            names,
        )
        # As shown in docs/design.md: a worker's turn and a claim, for the
        # default batch sizes.
        self.cycle = self.turn(False, False, False, 100)
        # And as most turns are sent while a snapshot is held (no limits in
        # use, plain successes), with heads (`pgqueue.core.heads`).
        self.cycle_with_heads = self.turn(
            False, False, False, 100, False, failures=False, plain=True, heads=True
        )
        self.claim = self.claim_for(False, False, 20)

        # The reaper, step 0: one reaper at a time per table; the others skip.
        self.reap_lock = _render(
            "SELECT pg_try_advisory_xact_lock(hashtext('pgqueue:reap:' || %s))"
        )
        # The reaper, step 1: running jobs whose lease ran out, locked so
        # that two reapers never judge the same job. It reads the running
        # index (migration 6): the running jobs only, however many dead and
        # pending ones the table holds, so a short statement_timeout spares it.
        self.expired = _render(
            """
SELECT id, attempts, max_attempts, locked_by FROM {table}
 WHERE status = 'running' AND locked_at < now() - %s::interval
 ORDER BY id
 FOR UPDATE SKIP LOCKED""",
            **names,
        )

        # A worker keeps the lease of the jobs it is still running, and
        # learns which of them were cancelled (should it have missed the
        # notification): no query of its own for that.
        self.heartbeat = _render(
            """
UPDATE {table} SET locked_at = now()
 WHERE id = ANY(%s::bigint[]) AND status = 'running' AND locked_by = %s
RETURNING id, cancel_requested_at IS NOT NULL""",
            **names,
        )

        # A worker that cannot listen looks for cancels between heartbeats:
        # a read, which neither rewrites nor locks the rows.
        self.cancel_requests = _render(
            "SELECT id FROM {table}"
            " WHERE id = ANY(%s::bigint[]) AND cancel_requested_at IS NOT NULL",
            **names,
        )

        self.get = _render("SELECT {cols} FROM {table} WHERE id = %s", **names)

        # An operator revives dead jobs: a fresh set of attempts, due now. A
        # unique job whose key another job holds now stays dead (and so does
        # all but the newest of several dead ones with one key): reviving it
        # would break the key's rule. `retry` counts what it revived.
        revivable = """
SELECT DISTINCT ON (t.unique_key, t.unique_scope, CASE WHEN t.unique_key IS NULL THEN t.id END)
       t.id FROM {table} AS t
 WHERE t.status = 'dead' AND {which}
   AND NOT EXISTS (
       SELECT FROM {table} AS o
        WHERE o.unique_key = t.unique_key AND o.unique_scope = t.unique_scope AND o.id <> t.id
          AND ((o.unique_scope = 'queued' AND o.status = 'pending' AND o.attempts = 0)
               OR (o.unique_scope = 'active' AND o.status IN ('pending', 'running'))))
 ORDER BY t.unique_key, t.unique_scope, CASE WHEN t.unique_key IS NULL THEN t.id END,
          t.id DESC"""
        revive = """
UPDATE {table}
   SET status = 'pending', attempts = 0, run_at = now(), locked_at = NULL, locked_by = NULL
 WHERE id IN ({revivable})
RETURNING id, kind"""

        def reviving(which: str) -> sql.Composable:
            chosen = sql.SQL(revivable).format(which=sql.SQL(which), **names)
            return sql.SQL(revive).format(revivable=chosen, **names)

        self.retry = _render(
            """
WITH revived AS ({revive})
SELECT id, pg_notify(%(channel)s, kind)::text FROM revived""",
            revive=reviving("t.id = ANY(%(ids)s::bigint[])"),
            **names,
        )

        # Counts by queue, priority, kind and status, the longest wait of a
        # ready job, and the running jobs whose lease is older than the
        # visibility timeout given.
        self.stats = _render(
            """
SELECT queue, priority, kind, status, count(*),
       now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now()),
       count(*) FILTER (WHERE status = 'running' AND locked_at < now() - %s::interval)
  FROM {table}
 GROUP BY queue, priority, kind, status""",
            **names,
        )

        # -- queues ----------------------------------------------------------

        # Pause or resume a queue: claims leave a paused queue's jobs alone.
        # Resuming wakes the workers.
        self.set_paused = _render(
            """
INSERT INTO {queues} AS q (queue, paused) VALUES (%(queue)s, %(paused)s)
ON CONFLICT (queue) DO UPDATE SET paused = EXCLUDED.paused, changed_at = now()
RETURNING queue, CASE WHEN NOT paused THEN pg_notify(%(channel)s, '') END""",
            **names,
        )
        # Every queue with jobs or a pause record: counts by status, paused or not.
        self.queue_states = _render(
            """
WITH counts AS (
    SELECT queue, status, count(*) AS n FROM {table} GROUP BY queue, status
)
SELECT coalesce(c.queue, q.queue), coalesce(q.paused, false), coalesce(c.status, 'pending'),
       coalesce(c.n, 0)
  FROM counts AS c FULL JOIN {queues} AS q ON q.queue = c.queue
 ORDER BY 1""",
            **names,
        )

        # Retention for the history table.
        self.prune_history = _render(
            """
WITH gone AS (DELETE FROM {history} WHERE finished_at < now() - %s::interval RETURNING 1)
SELECT count(*) FROM gone""",
            **names,
        )

        # For tests and operators: the claim's plan, with no row touched.
        self.explain_claim = b"EXPLAIN " + self.claim

        self.listen = _render("LISTEN {channel}", channel=sql.Identifier(self.channel))
        self.listen_control = _render(
            "LISTEN {channel}", channel=sql.Identifier(self.control_channel)
        )
        self.listen_results = _render(
            "LISTEN {channel}", channel=sql.Identifier(self.results_channel)
        )

        # -- for operators (``pgqueue jobs``, ``pgqueue dead``) -------------

        # A page of jobs in id order, filtered by status, kinds and queues (NULL: any).
        self.jobs = _render(
            """
SELECT {cols} FROM {table}
 WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[]))
   AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
   AND (%(after_id)s::bigint IS NULL OR id > %(after_id)s::bigint)
 ORDER BY id
 LIMIT %(limit)s""",
            **names,
        )

        # Every dead job (of some kinds) back to pending, as `retry` does it;
        # one notification per kind revived, not one per job.
        self.retry_dead = _render(
            """
WITH revived AS ({revive}), by_kind AS (
    SELECT kind, count(*) AS n FROM revived GROUP BY kind
)
SELECT coalesce(sum(n), 0)::bigint, count(pg_notify(%(channel)s, kind)) FROM by_kind""",
            revive=reviving("(%(kinds)s::text[] IS NULL OR t.kind = ANY(%(kinds)s::text[]))"),
            **names,
        )

        # Dead jobs that died before the cut-off go for good (a dead job's
        # run_at is when it died). With history on, each purged job is
        # copied there by the same statement.
        self.purge_dead = _render(
            """
WITH purged AS (
    DELETE FROM {table}
     WHERE status = 'dead' AND run_at < now() - %(older_than)s::interval
       AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[]))
    RETURNING {gone}
){keep}
SELECT count(*) FROM purged""",
            keep=_history_copy(keep, "purged", "dead"),
            **names,
        )

        # -- cancellation (docs/cancel.md) -------------------------------------
        #
        # Waiting and dead jobs go at once (recorded as cancelled); running
        # ones are marked, and their workers told on the control channel
        # (they also learn it from their next heartbeat). The rows are locked
        # first: a job being claimed right now is judged once the claim has
        # committed, as the running job it has become.
        self.cancel = _render(
            """
WITH target AS (
    SELECT id, status FROM {table} WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE
), cancelled AS (
    DELETE FROM {table} AS j USING target AS t
     WHERE j.id = t.id AND t.status IN ('pending', 'dead')
    RETURNING {leaving_j}){keep}{after},
asked AS (
    UPDATE {table} AS j SET cancel_requested_at = coalesce(j.cancel_requested_at, now())
      FROM target AS t
     WHERE j.id = t.id AND t.status = 'running'
    RETURNING j.id)
SELECT (SELECT coalesce(array_agg(id), '{{}}') FROM cancelled),
       (SELECT coalesce(array_agg(id), '{{}}') FROM asked),
       -- The ids, or "*" (too many for a notification: workers look).
       (SELECT pg_notify(%(control)s, CASE WHEN count(*) <= 300 THEN string_agg(id::text, ',')
                                          ELSE '*' END)::text
          FROM asked HAVING count(*) > 0) IS NULL,
       {told}""",
            keep=_history_copy(keep, "cancelled", "cancelled"),
            after=after_leaving("cancelled", "'cancelled'", "attempts"),
            told=told("cancelled"),
            **names,
        )

        # -- results (docs/results.md) -----------------------------------------
        #
        # Where a job stands: its row if it has one (pending, running, dead),
        # else its kept result (succeeded, dead, cancelled) until it expires.
        self.result = _render(
            """
SELECT status, NULL::jsonb, last_error, NULL::timestamptz FROM {table} WHERE id = %(id)s
UNION ALL
SELECT outcome, value, error, finished_at FROM {results}
 WHERE job_id = %(id)s AND expires_at > now()
   AND NOT EXISTS (SELECT FROM {table} WHERE id = %(id)s)""",
            **names,
        )
        # Neither: was the job enqueued by a transaction still open? An insert
        # of its id waits for that transaction (lock_timeout: LockNotAvailable);
        # finds the row committed meanwhile (nothing returned); or finds no
        # such job, and fails on purpose (division_by_zero) so that nothing
        # is written. Run in a transaction with a short lock_timeout.
        self.probe_uncommitted = _render(
            """
INSERT INTO {table} (id, kind) VALUES (%(id)s, 'pgqueue.probe')
ON CONFLICT (id) DO NOTHING
RETURNING id / 0""",
            **names,
        )
        # A setting for the rest of the caller's transaction (the probe's lock_timeout).
        self.set_local = b"SELECT set_config(%s, %s, true)"
        # Results past their time, removed by the reaper a batch at a time.
        self.prune_results = _render(
            """
DELETE FROM {results}
 WHERE job_id = ANY(ARRAY(SELECT job_id FROM {results} WHERE expires_at <= now() LIMIT 10000))""",
            **names,
        )

        # -- limits (docs/limits.md) -------------------------------------------
        #
        # A limited job's key gets its first slot when the job is enqueued
        # (one job at a time until `set_limit` says otherwise).
        self.ensure_slots = _render(
            """
INSERT INTO {slots} (limit_key, slot) SELECT unnest(%(keys)s::text[]), 1
ON CONFLICT DO NOTHING""",
            **names,
        )
        # set_limit: the limit, and slots up to it. Slots above a lowered
        # limit are no longer taken (the claim reads the limit); those free
        # now go, those taken go once free, at the next set_limit.
        self.set_limit = _render(
            """
WITH limit_row AS (
    INSERT INTO {limits} AS m (limit_key, max_running) VALUES (%(key)s, %(n)s)
    ON CONFLICT (limit_key) DO UPDATE SET max_running = EXCLUDED.max_running, changed_at = now()
    RETURNING 1
), added AS (
    INSERT INTO {slots} (limit_key, slot) SELECT %(key)s, generate_series(1, %(n)s)
    ON CONFLICT DO NOTHING RETURNING 1
), removed AS (
    DELETE FROM {slots} WHERE limit_key = %(key)s AND slot > %(n)s AND job_id IS NULL RETURNING 1
)
SELECT (SELECT count(*) FROM limit_row), (SELECT count(*) FROM added),
       (SELECT count(*) FROM removed), pg_notify(%(channel)s, '')""",
            **names,
        )
        # set_rate: a key's token bucket (full when new), and its first slot
        # (one job at a time until set_limit). A new rate keeps the tokens
        # the old one had filled, up to the new burst; None takes it away.
        self.set_rate = _render(
            """
WITH rate_row AS (
    INSERT INTO {limits} AS m (limit_key, max_running, per_second, burst, tokens, refilled_at)
    VALUES (%(key)s, NULL, %(per_second)s::double precision, %(burst)s::integer,
            %(burst)s::integer, now())
    ON CONFLICT (limit_key) DO UPDATE
       SET per_second = EXCLUDED.per_second, burst = EXCLUDED.burst,
           tokens = CASE WHEN m.per_second IS NULL OR EXCLUDED.per_second IS NULL
                         THEN EXCLUDED.tokens
                         ELSE least(EXCLUDED.burst, m.tokens + m.per_second
                                    * extract(epoch FROM now() - m.refilled_at)::double precision)
                    END,
           refilled_at = EXCLUDED.refilled_at, changed_at = now()
    RETURNING 1
), first_slot AS (
    INSERT INTO {slots} (limit_key, slot) VALUES (%(key)s, 1) ON CONFLICT DO NOTHING RETURNING 1
)
SELECT (SELECT count(*) FROM rate_row), (SELECT count(*) FROM first_slot),
       pg_notify(%(channel)s, '')""",
            **names,
        )
        # Every key with a limit or a slot: its limit, running and waiting
        # jobs, and its rate with the tokens it has now.
        self.limit_states = _render(
            """
WITH keys AS (
    SELECT limit_key FROM {limits} UNION SELECT DISTINCT limit_key FROM {slots}
)
SELECT k.limit_key, m.max_running,
       (SELECT count(*) FROM {slots} AS s WHERE s.limit_key = k.limit_key AND s.job_id IS NOT NULL),
       (SELECT count(*) FROM {table} AS t
         WHERE t.status = 'pending' AND t.limit_key = k.limit_key),
       m.per_second, m.burst,
       least(m.burst, m.tokens + m.per_second
             * extract(epoch FROM now() - m.refilled_at)::double precision)
  FROM keys AS k LEFT JOIN {limits} AS m ON m.limit_key = k.limit_key
 ORDER BY 1""",
            **names,
        )

        # -- schedules (docs/schedules.md) -----------------------------------
        #
        # A worker registers its schedules when it starts. A new row starts
        # at now(): ticks before a schedule existed are not enqueued. A known
        # one keeps its last tick and its pause; its definition is rewritten
        # only when it changed, so that workers restarting write nothing.
        self.register_schedule = _render(
            """
INSERT INTO {schedules} AS s (name, kind, cron, every, tz, payload, queue, priority, overlap,
                              last_tick)
VALUES (%(name)s, %(kind)s, %(cron)s, %(every)s::interval, %(tz)s, %(payload)s::jsonb,
        %(queue)s, %(priority)s, %(overlap)s, now())
ON CONFLICT (name) DO UPDATE
   SET kind = EXCLUDED.kind, cron = EXCLUDED.cron, every = EXCLUDED.every, tz = EXCLUDED.tz,
       payload = EXCLUDED.payload, queue = EXCLUDED.queue, priority = EXCLUDED.priority,
       overlap = EXCLUDED.overlap, last_tick = coalesce(s.last_tick, EXCLUDED.last_tick),
       updated_at = now()
 WHERE (s.kind, s.cron, s.every, s.tz, s.payload, s.queue, s.priority, s.overlap,
        s.last_tick IS NULL)
       IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.cron, EXCLUDED.every, EXCLUDED.tz,
                         EXCLUDED.payload, EXCLUDED.queue, EXCLUDED.priority, EXCLUDED.overlap,
                         false)""",
            **names,
        )
        # The scheduler's look: the database's clock (workers' clocks may be
        # skewed) and where its schedules stand. One row, even for none.
        self.schedule_clock = _render(
            """
SELECT now(), coalesce(array_agg(name), '{{}}'), coalesce(array_agg(last_tick), '{{}}')
  FROM {schedules} WHERE name = ANY(%(names)s::text[])""",
            **names,
        )
        # THE TICK: the schedule's row moves on to the tick and the tick's
        # job is written by one statement. Workers racing for one tick queue
        # on the row's lock; each that comes after the first finds last_tick
        # no longer before the tick, updates nothing and writes no job. A
        # paused schedule records its ticks without jobs. With overlap=False
        # ("free"), a tick while the schedule's previous job is pending or
        # running records the tick without a job (the "active" unique key).
        tick = """
WITH free AS MATERIALIZED (
    SELECT {free} AS free
), tick AS (
    UPDATE {schedules} AS s
       SET last_tick = %(tick)s,
           last_job_id = CASE WHEN s.paused OR NOT f.free THEN s.last_job_id
                         ELSE nextval(pg_get_serial_sequence(%(table)s, 'id')::regclass) END
      FROM free AS f
     WHERE s.name = %(name)s AND s.last_tick < %(tick)s
    RETURNING s.paused, f.free, s.last_job_id
), job AS (
    INSERT INTO {table} (id, kind, payload, run_at, queue, priority, unique_key, unique_scope)
    SELECT last_job_id, %(kind)s, %(payload)s::jsonb, %(tick)s, %(queue)s, %(priority)s,
           {unique}
      FROM tick WHERE NOT paused AND free{on_conflict}
    RETURNING id, kind
)
SELECT EXISTS (SELECT FROM tick), coalesce((SELECT paused FROM tick), false),
       (SELECT id FROM job), now(), (SELECT pg_notify(%(channel)s, kind)::text FROM job)"""
        active = sql.SQL(UNIQUE_PREDICATES["active"])
        # overlap -> the tick.
        holder = "NOT EXISTS (SELECT FROM {table} WHERE unique_key = %(unique_key)s AND {active})"
        self.schedule_ticks = {
            True: _render(
                tick,
                free=sql.SQL("true"),
                unique=sql.SQL("NULL, NULL"),
                on_conflict=sql.SQL(""),
                **names,
            ),
            False: _render(
                tick,
                free=sql.SQL(holder).format(active=active, **names),
                unique=sql.SQL("%(unique_key)s, 'active'"),
                on_conflict=sql.SQL("\n    ON CONFLICT (unique_key) WHERE {} DO NOTHING").format(
                    active
                ),
                **names,
            ),
        }
        # Every schedule, for `schedules()` and ``pgqueue cron list``.
        self.schedule_states = _render(
            """
SELECT name, kind, cron, every, tz, payload, queue, priority, overlap, paused, last_tick,
       last_job_id, updated_at, now()
  FROM {schedules} ORDER BY name""",
            **names,
        )
        # Pause or resume a schedule. A resumed one goes on from now: the
        # ticks it missed while paused are not made up for.
        self.set_schedule_paused = _render(
            """
UPDATE {schedules}
   SET paused = %(paused)s,
       last_tick = CASE WHEN paused AND NOT %(paused)s THEN greatest(last_tick, now())
                   ELSE last_tick END
 WHERE name = %(name)s
RETURNING name""",
            **names,
        )
        # An operator's run of a schedule now, from its row: a job like its
        # ticks' (overlap=False respected), not a tick (last_tick unchanged).
        self.trigger_schedule = _render(
            """
WITH s AS (
    SELECT kind, payload, queue, priority, overlap FROM {schedules} WHERE name = %(name)s
), job AS (
    INSERT INTO {table} (kind, payload, queue, priority, unique_key, unique_scope)
    SELECT kind, payload, queue, priority, CASE WHEN overlap THEN NULL ELSE %(unique_key)s END,
           CASE WHEN overlap THEN NULL ELSE 'active' END
      FROM s
    ON CONFLICT (unique_key) WHERE {active} DO NOTHING
    RETURNING id, kind
)
SELECT EXISTS (SELECT FROM s), (SELECT id FROM job),
       (SELECT pg_notify(%(channel)s, kind)::text FROM job)""",
            active=active,
            **names,
        )

    # At most this many claims and turns are kept rendered (batch sizes
    # times shapes); past it, they are rendered anew.
    RENDERED_MAX = 256

    def _remember(self, key: tuple[object, ...], render: Callable[[], bytes]) -> bytes:
        statement = self._rendered.get(key)
        if statement is None:
            if len(self._rendered) >= self.RENDERED_MAX:
                self._rendered.clear()
            statement = self._rendered[key] = render()
        return statement

    def claim_for(self, queues: bool, kinds: bool, limit: int, limited: bool = True) -> bytes:
        """The claim of up to `limit` jobs, with a ``queues`` and a ``kinds``
        parameter if told so (see `pgqueue.core.ops.QueueCore.claim`); of
        jobs without a limit key only, unless `limited`."""
        return self._remember(
            ("claim", queues, kinds, limit, limited),
            lambda: self._claim_statement(queues, kinds, limit, limited).as_bytes(None),
        )

    def turn(
        self,
        queues: bool,
        kinds: bool,
        budget: bool,
        limit: int,
        limited: bool = True,
        limited_max: int | None = None,
        *,
        failures: bool = True,
        plain: bool = False,
        heads: bool = False,
    ) -> bytes:
        """A worker's turn (see the ``cycle`` template above) claiming up to
        `limit` jobs, with ``queues``, ``kinds`` and ``claim_bytes``
        parameters if told so; jobs with a limit key too if `limited`, at
        most `limited_max` of them (default: `limit`). Without `failures`,
        it records none (and takes no failure parameters); if `plain`, its
        successes are those that hold no limit slot and keep no result
        (and it takes no result parameters). With `heads`, its claim starts
        each level after its head (a ``heads`` parameter: `pgqueue.core.heads`);
        without, it is the claim it was before heads existed."""
        (cycle, handing_done, plain_done, failure_ctes, no_failures, told, left_free, names) = (
            self._turn_parts
        )
        wake = "(SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1)"
        limited_max = limit if limited_max is None else min(limited_max, limit)

        def render() -> bytes:
            sources = ["done"] * (not plain) + ["failed_rows", "cancelled"] * failures
            # Successes hand their slots on when the turn claims limited jobs
            # (`settle`, a turn that claims nothing, hands nothing on).
            handed = limited and not plain and limit > 0
            ctes, update = self._claim_parts(
                queues,
                kinds,
                limit,
                budget=budget,
                worker=True,
                limited_jobs=limited,
                limited_max=limited_max,
                handed=handed,
                heads=heads,
            )
            ctes = ctes + sql.SQL(",") if limited else ctes
            full_done = handing_done(queues, kinds) if handed else self._worker_done
            return _render(
                cycle,
                done=plain_done if plain else full_done,
                failures=failure_ctes if failures else no_failures,
                limited=ctes,
                claim=update,
                told=told(*sources) if sources else sql.SQL("0"),
                wake=sql.SQL(wake if limited else "NULL::double precision"),
                left_free=left_free(*sources) if sources else sql.SQL("0"),
                **names,
            )

        shape = (queues, kinds, budget, limit, limited, limited_max, failures, plain, heads)
        return self._remember(("turn", *shape), render)


class SeedStatements:
    """The seed design's SQL, as its article wrote it: the baseline that
    ``pgqueue bench`` runs beside pgqueue (a psycopg port; batches of 20,
    one ``DELETE`` per job), and the batched delete of the bench's ceiling.
    Not used by the queue itself."""

    def __init__(self, table: str) -> None:
        names = {"table": sql.Identifier(*validate_table_name(table))}
        self.create = (
            _render(
                """
CREATE TABLE {table} (
  id           bigserial PRIMARY KEY,
  kind         text NOT NULL,
  payload      jsonb NOT NULL,
  run_at       timestamptz NOT NULL DEFAULT now(),
  attempts     int NOT NULL DEFAULT 0,
  max_attempts int NOT NULL DEFAULT 3,
  locked_at    timestamptz,
  locked_by    text,
  status       text NOT NULL DEFAULT 'pending',
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now()
)""",
                **names,
            ),
            _render(
                "CREATE INDEX {index} ON {table} (run_at, id) WHERE status = 'pending'",
                index=sql.Identifier(f"{validate_table_name(table)[-1]}_ready"),
                **names,
            ),
        )
        self.insert = _render("INSERT INTO {table} (kind, payload) VALUES (%s, %s)", **names)
        self.claim = _render(
            """
UPDATE {table} SET status='running', locked_at=now(), locked_by=%s, attempts=attempts+1
 WHERE id IN (
   SELECT id FROM {table}
    WHERE status='pending' AND run_at <= now()
    ORDER BY run_at, id
    LIMIT %s
    FOR UPDATE SKIP LOCKED)
 RETURNING id, kind, payload, attempts, max_attempts""",
            **names,
        )
        self.delete = _render("DELETE FROM {table} WHERE id = %s", **names)
        self.count = _render("SELECT count(*) FROM {table}", **names)
        # The ceiling of `pgqueue bench`: a batch deleted by id, nothing else.
        self.delete_batch = _render("DELETE FROM {table} WHERE id = ANY(%s)", **names)
