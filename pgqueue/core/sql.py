"""Every SQL statement pgqueue runs on a queue table, built once per table.

The schema itself (DDL) is in `pgqueue.core.migrations`.

Identifiers are validated (`validate_table_name`) and quoted with
`psycopg.sql`; values always travel as parameters. Statements are
rendered to bytes when a `Statements` is built, so the hot path neither
composes nor escapes anything, and psycopg can prepare them by text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, Final

from psycopg import sql

from .jobs import validate_table_name
from .queue.control import ControlStatements
from .queue.enqueue import EnqueueStatements
from .queue.inspect import InspectStatements
from .queue.limits import LimitStatements
from .queue.maintenance import MaintenanceStatements
from .queue.operators import OperatorStatements
from .queue.schedules import ScheduleStatements
from .queue.table import Table
from .schema.columns import (
    HISTORY_COLUMNS,
    INSERT_COLUMNS,
    JOB_COLUMNS,
    LEAVING_COLUMNS,
    job_columns,
)
from .schema.names import TableNames, notification_channel
from .schema.predicates import ORPHANED, UNIQUE_PREDICATES

__all__ = [
    "HISTORY_COLUMNS",
    "INSERT_COLUMNS",
    "JOB_COLUMNS",
    "ORPHANED",
    "UNIQUE_PREDICATES",
    "Statements",
    "notification_channel",
]

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


_read = job_columns


class Statements:
    """The statements for one queue table.

    >>> Statements("app.jobs").table_name
    'app.jobs'
    """

    def __init__(self, table: str, *, history: bool = False) -> None:
        n = TableNames.for_table(table)
        self.table_name = table
        self.history = history
        self.channel = n.channel
        self.control_channel = n.control_channel
        self.results_channel = n.results_channel
        t = n.table
        history_table = n.history
        cols = _read()
        jcols = _read("j")
        names = {
            "table": t,
            "cols": cols,
            "jcols": jcols,
            "insert_cols": sql.SQL(", ").join(sql.Identifier(c) for c in INSERT_COLUMNS),
            "history": history_table,
            "queues": n.queues,
            "leases": n.unique_leases,
            "schedules": n.schedules,
            "results": n.results,
            "limits": n.limits,
            "slots": n.limit_slots,
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
        leaving_cols = gone_cols + tuple(c for c in LEAVING_COLUMNS if c not in gone_cols)
        names["leaving"] = sql.SQL(", ").join(sql.Identifier(c) for c in leaving_cols)
        names["leaving_j"] = sql.SQL(", ").join(sql.SQL(f"j.{c}") for c in leaving_cols)
        # The same, for a job whose worker reported why it ended (failures):
        # the reason is what history and results keep.
        names["leaving_f"] = sql.SQL(", ").join(
            sql.SQL(f"j.{c}") for c in leaving_cols if c != "last_error"
        ) + sql.SQL(",\n              COALESCE(f.error, j.last_error) AS last_error")
        self.claim_index_name = n.index_name("unlimited")
        # The statements of each feature, rendered for this table.
        model = Table(n, history)
        self.enqueues = EnqueueStatements.of(model)
        self.maintenance = MaintenanceStatements.of(model)
        self.control = ControlStatements.of(model)
        self.limits = LimitStatements.of(model)
        self.schedules = ScheduleStatements.of(model)
        self.operators = OperatorStatements.of(model)
        self.inspect = InspectStatements.of(model)

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
             FROM levels AS l{per_kind}
            CROSS JOIN LATERAL (
                  SELECT run_at, id, {size} AS size FROM {table}
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now(){kind_filter}{orphans}
                   ORDER BY run_at, id
                   LIMIT {limit}
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT {limit}) AS x
     LIMIT {limit})"""
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
WITH RECURSIVE{found},{levels},{pick}
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
                size=payload_size if budget else sql.SQL("0"),
                **names,
            )
            update = sql.SQL(claim).format(
                found=sql.SQL(given_queues if queues else every_queue).format(**names),
                levels=sql.SQL(levels).format(**names),
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
       {left_free}
  FROM relax"""
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

        # The worker's turn, by shape: see `turn`. Its last column: in how
        # many seconds a key it left jobs of for want of a token has one.
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
        self.claim = self.claim_for(False, False, 20)

        # For tests and operators: the claim's plan, with no row touched.
        self.explain_claim = b"EXPLAIN " + self.claim

        self.listen = _render("LISTEN {channel}", channel=sql.Identifier(self.channel))
        self.listen_control = _render(
            "LISTEN {channel}", channel=sql.Identifier(self.control_channel)
        )
        self.listen_results = _render(
            "LISTEN {channel}", channel=sql.Identifier(self.results_channel)
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

    def every(self) -> dict[str, bytes | dict[Any, bytes]]:
        """Every statement rendered for the table, by name (a dict: by shape),
        each feature's beside this object's own."""
        found = {
            name: value
            for name, value in vars(self).items()
            if isinstance(value, (bytes, dict)) and not name.startswith("_")
        }
        for feature in (
            self.enqueues,
            self.maintenance,
            self.control,
            self.limits,
            self.schedules,
            self.operators,
            self.inspect,
        ):
            found.update((f.name, getattr(feature, f.name)) for f in fields(feature))
        return found

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
    ) -> bytes:
        """A worker's turn (see the ``cycle`` template above) claiming up to
        `limit` jobs, with ``queues``, ``kinds`` and ``claim_bytes``
        parameters if told so; jobs with a limit key too if `limited`, at
        most `limited_max` of them (default: `limit`). Without `failures`,
        it records none (and takes no failure parameters); if `plain`, its
        successes are those that hold no limit slot and keep no result
        (and it takes no result parameters)."""
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

        shape = (queues, kinds, budget, limit, limited, limited_max, failures, plain)
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
