"""The one list of steps that follow a job's leaving the table.

A job that leaves the table (CTE `source`, its rows with the table's
``leaving`` columns) is copied to the history (if the queue keeps one), the
slot of its limit is freed or handed on (fenced by the attempt that took
it), and its result is kept if it asked for one (result_ttl):
`LEAVING_STEPS`, which every statement that ends jobs composes through
`after_leaving` (`pgqueue.core.queue.outcomes`). The `results` notification
is sent at the end of the statement, by `told`, for the results kept only.
Releasing a job's dependents (or cancelling them with it) is one more
entry: `follow_dependents` (`pgqueue.core.queue.depends`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from psycopg import sql

from .depends import follow_dependents
from .table import Table, cte

__all__ = ["LEAVING_STEPS", "Leaving", "after_leaving", "copy_to_history", "left_free", "told"]

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
    # Successes: the sources ending jobs in the same statement whose
    # dependents are cancelled with them (`{source}_below`, defined before):
    # what they cancel, the release leaves alone (`pgqueue.core.queue.depends`).
    spared: tuple[str, ...] = ()


def copy_to_history(t: Table, leaving: Leaving) -> sql.Composable:
    if leaving.history is None:
        return sql.SQL("")
    return t.history_copy(leaving.source, leaving.history)


def free_slot(t: Table, leaving: Leaving) -> sql.Composable:
    source = leaving.source
    fence = sql.SQL(SLOT_FENCE).format(attempt=sql.SQL(leaving.attempt))
    names = {"freed": cte(source, "freed"), "source": sql.SQL(source), "fence": fence}
    if leaving.served is None:
        return sql.SQL(",") + t.compose(FREED, **names)
    return sql.SQL(",") + t.compose(
        HANDED_ON,
        left=cte(source, "slots"),
        handed=cte(source, "handed"),
        served=leaving.served,
        **names,
    )


def keep_result(t: Table, leaving: Leaving) -> sql.Composable:
    return t.compose(
        KEEP_RESULT,
        source=sql.SQL(leaving.source),
        kept=cte(leaving.source, "results"),
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
LEAVING_STEPS: Final[tuple[LeavingStep, ...]] = (
    copy_to_history,
    free_slot,
    keep_result,
    follow_dependents,
)


def after_leaving(
    t: Table, leaving: Leaving, steps: tuple[LeavingStep, ...] | None = None
) -> sql.Composable:
    """The CTEs of the leaving `steps` (default: `LEAVING_STEPS`) for `leaving`."""
    chosen = LEAVING_STEPS if steps is None else steps
    return sql.Composed([step(t, leaving) for step in chosen])


def told(t: Table, *sources: str) -> sql.Composable:
    """The notifications of a statement that records outcomes, a scalar
    subquery of its last SELECT (so that it runs once what it announces is
    written): a job's id on the results channel for each result kept; and,
    if it left limit slots free, one on the jobs channel, which wakes the
    workers (the claim of this very statement saw the slots taken). Counts
    the notifications."""
    kept = sql.SQL("\n                UNION ALL ").join(
        sql.SQL("SELECT job_id FROM {}").format(cte(src, "results")) for src in sources
    )
    freed = _slots_left_free(sources, "\n                        UNION ALL ")
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
    freed = _slots_left_free(sources, "\n                UNION ALL ")
    return sql.SQL("(SELECT count(*) FROM ({freed}) AS f)").format(freed=freed)


def _slots_left_free(sources: tuple[str, ...], union: str) -> sql.Composable:
    """The slots the statement's outcomes freed and handed to no job."""
    return sql.SQL(union).join(
        sql.SQL("SELECT slot FROM {} WHERE job_id IS NULL").format(cte(src, "freed"))
        for src in sources
    )
