"""What ends a job: success, failure (retry, death, cancellation), the
operator's cancel; built from one list of "leaving" steps.

Each composes the steps that follow a job's leaving the table from one
list (`pgqueue.core.queue.leaving`). The plans decide what a failed job
becomes (`decide`) and read back what the statements wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from psycopg import sql

from ..backoff import Backoff
from ..jobs import Job, JobNotRunning, JobStatus, error_text, validate_delay, validate_ids
from ..plans import Operation, Plan, Query, Rows
from ..states import Event, next_state
from .leaving import Leaving, after_leaving, copy_to_history, told
from .table import Table

__all__ = ["OutcomeStatements", "failure_ctes", "recorded_failures", "success_ctes"]


# -- the statements that end jobs ------------------------------------------------
#
# Success: the row goes. Only a running job can succeed. A worker's successes
# are fenced by its name (`turn`); `complete` is not.
DONE: Final = """
done AS (
    DELETE FROM {table}
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running'{fence}
    RETURNING {leaving}){after}"""
# A job that jobs depend on ends only if its dependents are those this
# statement's snapshot sees: an enqueue that attached one meanwhile (this
# statement waited for its lock) changed `dependents`, and the job is left
# running, for the caller to record again by a statement that sees the new
# dependent (`pgqueue.core.queue.depends`). Free for the other jobs.
DEPENDENTS_SEEN: Final = """
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM {table} AS s WHERE s.id = {table}.id))"""
# The same, for the statements that end jobs (as ``j``) dead or cancelled:
# what waits below such a job is cancelled with it, and must all be seen.
J_DEPENDENTS_SEEN: Final = """
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM {table} AS s WHERE s.id = j.id))"""
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
       AND j.cancel_requested_at IS NULL{seen}
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents){after_failed},
cancelled AS (
    DELETE FROM {table} AS j{using_rows}
       AND j.cancel_requested_at IS NOT NULL{seen}
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
# Pending, waiting and dead jobs go at once (recorded as cancelled, with the
# jobs that wait for them: `pgqueue.core.queue.depends`); running ones are
# marked, and their workers told on the control channel (they also learn it
# from their next heartbeat). The rows are locked first: a job being claimed
# right now is judged once the claim has committed, as the running job it
# has become.
CANCEL: Final = """
WITH target AS (
    SELECT id, status FROM {table} WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE
), cancelled AS (
    DELETE FROM {table} AS j USING target AS t
     WHERE j.id = t.id AND t.status IN ('pending', 'dead', 'waiting'){seen}
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
       {told},
       (SELECT count(*) FROM cancelled_swept)"""


def success_ctes(
    t: Table,
    *,
    worker: bool = False,
    plain: bool = False,
    served: sql.Composable | None = None,
    spared: tuple[str, ...] = (),
) -> sql.Composable:
    """The ``done`` CTE and its leaving steps. A worker's successes are
    fenced by its name; `served`: their slots go on to the next ready job of
    their key that the worker may claim. `plain` successes hold no slot and
    keep no result (the statement deletes only those): of the leaving steps,
    only the copy to history applies. A caller that was wrong loses neither
    a slot nor a result: the job stays running. So does a job whose
    dependents changed while the statement waited for it (`DEPENDENTS_SEEN`):
    the caller records it again. `spared`: the sources of the same
    statement, written before, whose cancels the release leaves alone."""
    fence = " AND locked_by = %(worker)s" if worker or plain else ""
    if plain:
        fence += " AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL"
    else:
        fence += t.compose(DEPENDENTS_SEEN).as_string(None)
    leaving = Leaving(
        "done", "'succeeded'", value="v.value", history="succeeded", served=served, spared=spared
    )
    steps = (copy_to_history,) if plain else None  # None: every leaving step
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
        seen=t.compose(J_DEPENDENTS_SEEN),
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
            cancel=t.render(
                CANCEL,
                after=after_leaving(t, cancelled),
                told=told(t, "cancelled"),
                seen=t.compose(J_DEPENDENTS_SEEN),
            ),
        )


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed (or expired, or released) job, ready to be recorded."""

    job_id: int
    attempts: int
    locked_by: str | None
    new_attempts: int
    status: JobStatus
    delay: timedelta
    error: str | None


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What `cancel` did: jobs removed at once (pending, waiting or dead),
    running jobs asked to stop, and ids not in the queue (finished, or never
    there); and how many jobs that waited for those removed went with them
    (`depends_on`, docs/workflows.md)."""

    deleted: list[int]
    requested: list[int]
    not_found: list[int]
    dependents: int = 0


def decide(
    job: Job, error: object, *, retry_in: timedelta | None, event: Event, backoff: Backoff
) -> Failure:
    """Decide what a failed, expired or released job becomes."""
    if not isinstance(job, Job):
        raise TypeError(f"expected a Job, got {type(job).__name__}")
    if retry_in is not None:
        validate_delay(retry_in, "retry_in")
    status = next_state(job.status, event, attempts=job.attempts, max_attempts=job.max_attempts)
    assert isinstance(status, JobStatus)
    new_attempts = job.attempts
    if event is Event.RELEASE:
        # The job never started: give its attempt back.
        new_attempts = max(job.attempts - 1, 0)
        delay = timedelta(0)
    elif retry_in is not None:
        delay = retry_in
    elif event is Event.EXPIRE or event is Event.CANCEL:
        delay = timedelta(0)
    else:
        delay = backoff.delay(job.attempts)
    text = None if event is Event.RELEASE else error_text(error)
    return Failure(job.id, job.attempts, job.locked_by, new_attempts, status, delay, text)


def complete(
    s: OutcomeStatements, jobs_or_ids: Iterable[Job | int], results: Mapping[int, str] | None
) -> Operation[list[int]]:
    ids = validate_ids(jobs_or_ids)
    params = {"done": ids, **result_arrays(results)}

    def plan() -> Plan[list[int]]:
        if not ids:
            return []
        ((done, _),) = yield Query(s.complete, params)
        if len(done) < len(ids):
            # Not running (nothing to do), or a dependent was attached while
            # the statement waited (`DEPENDENTS_SEEN`): once more, afresh.
            seen = set(done)
            rest = {**params, "done": [i for i in ids if i not in seen]}
            ((more, _),) = yield Query(s.complete, rest)
            done = [*done, *more]
        return list(done)

    return Operation(plan())


def record_failures(
    s: OutcomeStatements, failures: Sequence[Failure]
) -> Operation[dict[int, JobStatus]]:
    def plan() -> Plan[dict[int, JobStatus]]:
        if not failures:
            return {}
        return (yield from recorded_failures(s, failures))

    return Operation(plan())


def recorded_failures(
    s: OutcomeStatements, failures: Sequence[Failure], first: Rows | None = None
) -> Plan[dict[int, JobStatus]]:
    """Record failures (or read what `first`, a statement that recorded them,
    wrote); those it did not write are tried once more by a statement of
    their own: a job whose dependents changed while the first waited for it
    (`J_DEPENDENTS_SEEN`) is recorded then. Each job's status after."""
    if first is None:
        first = yield Query(s.record_failures, failure_arrays(failures))
    done = written(first)
    rest = [f for f in failures if f.job_id not in done]
    if rest:
        done |= written((yield Query(s.record_failures, failure_arrays(rest))))
    return done


def written_status(failure: Failure, written: dict[int, JobStatus]) -> JobStatus:
    """The status a recorded failure left, or `JobNotRunning` if nothing was written."""
    try:
        return written[failure.job_id]
    except KeyError:
        raise JobNotRunning(
            f"job {failure.job_id} is not running under attempt {failure.attempts}; "
            "its lease probably expired"
        ) from None


def cancel(
    s: OutcomeStatements, control_channel: str, job_ids: Iterable[Job | int]
) -> Operation[Cancelled]:
    """Cancel jobs: waiting and dead ones go now; running ones are asked to stop."""
    ids = sorted(set(validate_ids(job_ids)))
    params = {"ids": ids, "control": control_channel}

    def plan() -> Plan[Cancelled]:
        if not ids:
            return Cancelled([], [], [])
        ((deleted, requested, _, _, swept),) = yield Query(s.cancel, params)
        missing = [i for i in ids if i not in set(deleted) | set(requested)]
        if missing:
            # Not in the table, or a dependent was attached while the
            # statement waited for the job (`J_DEPENDENTS_SEEN`): once more.
            ((more, asked, _, _, also),) = yield Query(s.cancel, {**params, "ids": missing})
            deleted, requested, swept = [*deleted, *more], [*requested, *asked], swept + also
        found = set(deleted) | set(requested)
        return Cancelled(
            sorted(deleted), sorted(requested), [i for i in ids if i not in found], int(swept)
        )

    return Operation(plan())


def failure_arrays(failures: Sequence[Failure]) -> dict[str, list[Any]]:
    """The parameters of the failures' CTEs: one array per column."""
    return {
        "f_id": [f.job_id for f in failures],
        "f_attempts": [f.attempts for f in failures],
        "f_locked_by": [f.locked_by for f in failures],
        "f_new_attempts": [f.new_attempts for f in failures],
        "f_status": [f.status.value for f in failures],
        "f_delay": [f.delay for f in failures],
        "f_error": [f.error for f in failures],
    }


def result_arrays(results: Mapping[int, str] | None) -> dict[str, list[Any]]:
    """The return values a statement that records successes keeps (JSON text)."""
    if not results:
        return {"r_id": [], "r_value": []}
    return {"r_id": list(results), "r_value": list(results.values())}


def written(rows: Rows) -> dict[int, JobStatus]:
    """What the failures statement wrote: each job's status after it."""
    ((ids, statuses, _),) = rows
    return {i: JobStatus(s) for i, s in zip(ids, statuses, strict=True)}
