"""What ends a job: success, failure (retry, death, cancellation), the
operator's cancel; built from one list of "leaving" steps.

A job that leaves the table (CTE `source`, its rows with the table's
``leaving`` columns) is copied to the history (if the queue keeps one), the
slot of its limit is freed (fenced by the attempt that took it), and its
result is kept if it asked for one (result_ttl): `LEAVING_STEPS`, which
every statement that ends jobs composes through `after_leaving`. The
`results` notification is sent at the end of the statement, by `told`, for
the results kept only. A new step (say, releasing a job's dependents) is
one more entry in `LEAVING_STEPS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from psycopg import sql

from .table import Table

__all__ = [
    "LEAVING_STEPS",
    "Leaving",
    "OutcomeStatements",
    "after_leaving",
    "failure_ctes",
    "left_free",
    "success_ctes",
    "told",
]

# -- the leaving steps ----------------------------------------------------------
#
# The slots that the jobs leaving (CTE `{source}`) held are freed, fenced by
# the attempt that took them. In a worker's turn (`served`: which jobs it may
# claim), a freed slot is handed straight to the next ready job of its key,
# which the turn claims (`{source}_handed`, read by the claim): no slot waits
# for a claim that can see it free, and no other worker races this one for
# it. A slot is handed within the limit only, as `free` takes one, and never
# for a key with a rate (its tokens are the claim's to spend). A limit
# lowered by a statement running at that very moment lets the slot go once
# more, as a claim that began before it would. The freed CTE returns each
# slot with its new job (NULL: free).
SLOT_FENCE: Final = """d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.{attempt}"""
FREED: Final = """
{freed} AS (
    UPDATE {slots} AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM {source} AS d
     WHERE {fence}
    RETURNING s.slot, s.job_id)"""
HANDED_ON: Final = """
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
# A result kept, for the jobs that asked for one; of a failure, only a death.
KEEP_RESULT: Final = """,
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
# A success's return value, as JSON text, for the jobs that keep it.
VALUES_JOIN: Final = """
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id"""

# -- the statements that end jobs ------------------------------------------------
#
# Success: the row goes. Only a running job can succeed. A worker's successes
# are fenced by its name (`cycle`); `complete` is not.
DONE: Final = """
done AS (
    DELETE FROM {table}
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running'{fence}
    RETURNING {leaving}){after}"""
COMPLETE: Final = """
WITH{done}
SELECT (SELECT coalesce(array_agg(id), '{{}}') FROM done),
       {told}"""
# Failure, expiry and release for a batch of jobs, each with the next state
# the state machine chose. The claim's attempts and locked_by fence the
# write: a job reclaimed since (by a new claim, which bumps attempts, or by
# another worker after a retry reset them) is left alone. A job whose
# cancellation was requested is deleted instead, whatever the worker decided:
# a cancelled job is never retried, reaped back or buried. The table, not the
# worker, says which: a job its worker reports cancelled without a request in
# the table (the worker trusted a forged notification) is a plain failure,
# pending again, or dead when it used its last attempt.
FAILURE_ROWS: Final = """
      {verb} unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by"""
FAILURES: Final = """
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
    RETURNING {leaving_f}){after_cancelled},
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled)"""
NO_FAILURES: Final = """
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false)"""
RECORD_FAILURES: Final = """
WITH{failures}
SELECT (SELECT coalesce(array_agg(id), '{{}}') FROM failed),
       (SELECT coalesce(array_agg(status), '{{}}') FROM failed),
       {told}"""
# -- cancellation (docs/cancel.md) ---------------------------------------------
#
# Waiting and dead jobs go at once (recorded as cancelled); running ones are
# marked, and their workers told on the control channel (they also learn it
# from their next heartbeat). The rows are locked first: a job being claimed
# right now is judged once the claim has committed, as the running job it
# has become.
CANCEL: Final = """
WITH target AS (
    SELECT id, status FROM {table} WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE
), cancelled AS (
    DELETE FROM {table} AS j USING target AS t
     WHERE j.id = t.id AND t.status IN ('pending', 'dead')
    RETURNING {leaving_j}){after},
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
       {told}"""


@dataclass(frozen=True, slots=True)
class Leaving:
    """Jobs that end, as the rows of the CTE `source`: what the leaving
    steps need to know of them."""

    source: str
    # What a kept result records: an SQL expression of `source`'s row ``d``.
    outcome: str
    # The column of ``d`` holding the attempt that took the job's slot.
    attempt: str = "attempts"
    value: str = "NULL"
    error: str = "NULL"
    # What the history records them as; None: they stay in the table.
    history: str | None = None
    # In a worker's turn, which jobs it may claim: a freed slot goes to the
    # next ready job of its key among them (`HANDED_ON`). None: freed.
    served: sql.Composable | None = None


def copy_to_history(t: Table, leaving: Leaving) -> sql.Composable:
    if leaving.history is None:
        return sql.SQL("")
    return t.history_copy(leaving.source, leaving.history)


def free_slot(t: Table, leaving: Leaving) -> sql.Composable:
    source = leaving.source
    fence = sql.SQL(SLOT_FENCE).format(attempt=sql.SQL(leaving.attempt))
    names = {"freed": sql.SQL(f"{source}_freed"), "source": sql.SQL(source), "fence": fence}
    if leaving.served is None:
        return sql.SQL(",") + t.compose(FREED, **names)
    return sql.SQL(",") + t.compose(
        HANDED_ON,
        left=sql.SQL(f"{source}_slots"),
        handed=sql.SQL(f"{source}_handed"),
        served=leaving.served,
        **names,
    )


def keep_result(t: Table, leaving: Leaving) -> sql.Composable:
    return t.compose(
        KEEP_RESULT,
        source=sql.SQL(leaving.source),
        kept=sql.SQL(f"{leaving.source}_results"),
        outcome=sql.SQL(leaving.outcome),
        value=sql.SQL(leaving.value),
        error=sql.SQL(leaving.error),
        join=sql.SQL(VALUES_JOIN if leaving.value == "v.value" else ""),
        only=sql.SQL("\n       AND d.status = 'dead'" if leaving.outcome == "d.status" else ""),
    )


LeavingStep = Callable[[Table, Leaving], sql.Composable]
# What follows a job's leaving the table, in order: each a CTE (or nothing)
# appended after the CTE `source` in one WITH, so that all of it is written
# by the statement that ended the job, or none.
LEAVING_STEPS: Final[tuple[LeavingStep, ...]] = (copy_to_history, free_slot, keep_result)


def after_leaving(
    t: Table, leaving: Leaving, steps: tuple[LeavingStep, ...] = LEAVING_STEPS
) -> sql.Composable:
    """The CTEs of the leaving `steps` (default: all of them) for `leaving`."""
    return sql.Composed([step(t, leaving) for step in steps])


def told(t: Table, *sources: str) -> sql.Composable:
    """The notifications of a statement that records outcomes, a scalar
    subquery of its last SELECT (so that it runs once what it announces is
    written): a job's id on the results channel for each result kept; and,
    if it left limit slots free, one on the jobs channel, which wakes the
    workers (the claim of this very statement saw the slots taken). Counts
    the notifications."""
    kept = sql.SQL("\n                UNION ALL ").join(
        sql.SQL(f"SELECT job_id FROM {src}_results") for src in sources
    )
    freed = sql.SQL("\n                        UNION ALL ").join(
        sql.SQL(f"SELECT slot FROM {src}_freed WHERE job_id IS NULL") for src in sources
    )
    return t.compose(
        "(SELECT count(pg_notify({results_channel}, job_id::text))"
        "\n          FROM ({kept}) AS k)"
        "\n       + (SELECT count(pg_notify({jobs_channel}, ''))"
        "\n            FROM (SELECT FROM ({freed}) AS f HAVING count(*) > 0) AS w)",
        kept=kept,
        freed=freed,
    )


def left_free(*sources: str) -> sql.Composable:
    """How many slots the statement's outcomes left free (none handed on):
    a claim that can see them free may take them."""
    freed = sql.SQL("\n                UNION ALL ").join(
        sql.SQL(f"SELECT slot FROM {src}_freed WHERE job_id IS NULL") for src in sources
    )
    return sql.SQL("(SELECT count(*) FROM ({freed}) AS f)").format(freed=freed)


def success_ctes(
    t: Table, *, worker: bool = False, plain: bool = False, served: sql.Composable | None = None
) -> sql.Composable:
    """The ``done`` CTE and its leaving steps. A worker's successes are
    fenced by its name; `served`: their slots go on to the next ready job of
    their key that the worker may claim. `plain` successes hold no slot and
    keep no result (the statement deletes only those): of the leaving steps,
    only the copy to history applies. A caller that was wrong loses neither
    a slot nor a result: the job stays running."""
    fence = " AND locked_by = %(worker)s" if worker or plain else ""
    if plain:
        fence += " AND limit_key IS NULL AND result_ttl IS NULL"
    leaving = Leaving("done", "'succeeded'", value="v.value", history="succeeded", served=served)
    steps = (copy_to_history,) if plain else LEAVING_STEPS
    return t.compose(DONE, fence=sql.SQL(fence), after=after_leaving(t, leaving, steps))


def failure_ctes(t: Table) -> sql.Composable:
    """The CTEs that record failures (``failed_rows``, ``cancelled``) and
    name them all (``failed``: id, status)."""
    failed = Leaving("failed_rows", "d.status", attempt="claimed", error="d.last_error")
    cancelled = Leaving("cancelled", "'cancelled'", error="d.last_error", history="cancelled")
    return t.compose(
        FAILURES,
        from_rows=sql.SQL(FAILURE_ROWS).format(verb=sql.SQL("FROM")),
        using_rows=sql.SQL(FAILURE_ROWS).format(verb=sql.SQL("USING")),
        after_failed=after_leaving(t, failed),
        after_cancelled=after_leaving(t, cancelled),
    )


@dataclass(frozen=True, slots=True)
class OutcomeStatements:
    complete: bytes
    record_failures: bytes
    cancel: bytes

    @classmethod
    def of(cls, t: Table) -> OutcomeStatements:
        cancelled = Leaving("cancelled", "'cancelled'", history="cancelled")
        return cls(
            complete=t.render(COMPLETE, done=success_ctes(t), told=told(t, "done")),
            record_failures=t.render(
                RECORD_FAILURES,
                failures=failure_ctes(t),
                told=told(t, "failed_rows", "cancelled"),
            ),
            cancel=t.render(CANCEL, after=after_leaving(t, cancelled), told=told(t, "cancelled")),
        )
