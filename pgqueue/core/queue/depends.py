"""Workflows: jobs that wait for other jobs (docs/workflows.md).

A job enqueued with ``depends_on`` is written 'waiting' (outside every
claim's index) with ``waiting_on``, the number of its dependencies still in
the table, and one row per such dependency in the dependencies table. Each
dependency gets ``dependents`` (how many jobs were ever attached to it): the
statements that end a job look for its dependents only when it has some.

The leaving step `follow_dependents` (one entry of `LEAVING_STEPS`) does the
rest, in the statement that ends the job:

- a success takes 1 off ``waiting_on`` of each dependent, and makes it
  pending at 0: the row of the dependent is the lock that two parents ending
  at once on two workers take in turn, so it is released exactly once;
- a death or a cancellation deletes every waiting job below it (directly or
  through others), recorded in history and results as cancelled, with the
  reason.

An enqueue attaches to its dependencies under their row locks; a success
that waited for such a lock sees, in its own snapshot, none of what the
enqueue wrote, so it does not end the job then (the fence in
`pgqueue.core.queue.outcomes`): its caller records it again, by a statement
that sees the new dependent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from psycopg import sql

from ..jobs import ValidatedSpec, validate_job_id
from ..plans import Operation, Plan, Query, fetch
from ..schema.names import TableNames
from .table import FeatureStatements, Table, cte

if TYPE_CHECKING:
    from .leaving import Leaving

__all__ = [
    "DependencyStatements",
    "Group",
    "check_dependencies",
    "dependents",
    "follow_dependents",
    "insert_dependent",
    "insert_dependents",
]

# Before anything is written: where each dependency stands. A row of the
# table (its status); else its kept result's outcome, if any; and whether
# the id sequence ever gave it out (an id past it never existed).
CHECK: Final = """
SELECT d.id, j.status, r.outcome,
       d.id <= coalesce(pg_sequence_last_value(
                            pg_get_serial_sequence(%(table)s, 'id')::regclass), 0)
  FROM unnest(%(depends_on)s::bigint[]) AS d(id)
  LEFT JOIN {table} AS j ON j.id = d.id
  LEFT JOIN {results} AS r ON r.job_id = d.id
 ORDER BY d.id"""
# One job that depends on others, in one statement: its dependencies still
# in the table are locked (in id order: enqueues never deadlock on them) and
# marked, the job is written waiting for those (pending if none is left),
# and one dependency row written per mark. A dependency's kept value, if it
# succeeded already, goes into the job's parents at once.
ENQUEUE: Final = """
WITH parent AS (
    SELECT id, status FROM {table} WHERE id = ANY(%(depends_on)s::bigint[])
     ORDER BY id FOR UPDATE
), marked AS (
    UPDATE {table} AS j SET dependents = coalesce(j.dependents, 0) + 1
      FROM parent AS p
     WHERE j.id = p.id AND p.status <> 'dead' AND j.id = ANY(%(depends_on)s::bigint[])
    RETURNING j.id
), job AS (
    INSERT INTO {table} (kind, payload, run_at, max_attempts, queue, priority, result_ttl,
                         limit_key, trace_context, status, waiting_on, parents)
    SELECT %(kind)s, %(payload)s::jsonb,
           COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
           %(queue)s, %(priority)s, %(result_ttl)s::interval, %(limit_key)s, %(trace_context)s,
           CASE WHEN w.n > 0 THEN 'waiting' ELSE 'pending' END, w.n,
           (SELECT jsonb_object_agg(d.id::text, NULL::jsonb)
              FROM unnest(%(depends_on)s::bigint[]) AS d(id))
           || (SELECT coalesce(jsonb_object_agg(r.job_id::text, r.value), '{{}}')
                 FROM {results} AS r
                WHERE r.job_id = ANY(%(depends_on)s::bigint[]) AND r.outcome = 'succeeded')
      FROM (SELECT count(*)::integer AS n FROM marked) AS w
    RETURNING id, kind, status
), edges AS (
    INSERT INTO {dependencies} (parent_id, job_id) SELECT m.id, job.id FROM marked AS m, job
)
SELECT id, CASE WHEN status = 'pending' THEN pg_notify(%(channel)s, kind) END::text,
       (SELECT coalesce(array_agg(id), '{{}}') FROM parent WHERE status = 'dead')
  FROM job"""
# Many jobs that depend on others, in one statement, as `ENQUEUE` does one:
# the jobs as arrays of `INSERT_COLUMNS` (their ids given out beforehand),
# their dependencies as pairs (job, dependency).
ENQUEUE_MANY: Final = """
WITH pairs AS (
    SELECT x.j, x.p FROM unnest(%(pair_job)s::bigint[], %(pair_parent)s::bigint[]) AS x(j, p)
), parent AS (
    SELECT id, status FROM {table} WHERE id = ANY(%(pair_parent)s::bigint[])
     ORDER BY id FOR UPDATE
), marked AS (
    UPDATE {table} AS t SET dependents = coalesce(t.dependents, 0) + c.n
      FROM (SELECT x.p, count(*)::integer AS n
              FROM pairs AS x JOIN parent AS q ON q.id = x.p AND q.status <> 'dead'
             GROUP BY x.p) AS c
     WHERE t.id = c.p AND t.id = ANY(%(pair_parent)s::bigint[])
    RETURNING t.id
), live AS (
    SELECT x.j, x.p FROM pairs AS x JOIN marked AS m ON m.id = x.p
), job AS (
    INSERT INTO {table} ({insert_cols}, trace_context, status, waiting_on, parents)
    SELECT r.*, %(trace_context)s::text,
           CASE WHEN coalesce(w.n, 0) > 0 THEN 'waiting' ELSE 'pending' END, coalesce(w.n, 0),
           k.parents
      FROM unnest(%(id)s::bigint[], %(kind)s::text[], %(payload)s::jsonb[],
                  %(run_at)s::timestamptz[], %(max_attempts)s::integer[], %(queue)s::text[],
                  %(priority)s::smallint[], %(result_ttl)s::interval[], %(limit_key)s::text[])
           AS r(id, kind, payload, run_at, max_attempts, queue, priority, result_ttl, limit_key)
      LEFT JOIN (SELECT j, count(*)::integer AS n FROM live GROUP BY j) AS w ON w.j = r.id
      LEFT JOIN (SELECT x.j, jsonb_object_agg(x.p::text, v.value) AS parents
                   FROM pairs AS x
                   LEFT JOIN {results} AS v ON v.job_id = x.p AND v.outcome = 'succeeded'
                  GROUP BY x.j) AS k ON k.j = r.id
    RETURNING id, kind, status
), edges AS (
    INSERT INTO {dependencies} (parent_id, job_id) SELECT p, j FROM live
)
SELECT (SELECT count(*) FROM job),
       (SELECT coalesce(array_agg(id), '{{}}') FROM parent WHERE status = 'dead'),
       (SELECT count(pg_notify(%(channel)s, kind))
          FROM (SELECT DISTINCT kind FROM job WHERE status = 'pending') AS k)"""
# The jobs that wait for a job (while it is in the table).
DEPENDENTS: Final = "SELECT job_id FROM {dependencies} WHERE parent_id = %s ORDER BY job_id"

# -- the leaving step ------------------------------------------------------------
#
# A success: its dependents lose one job to wait for, and those left with
# none become pending (due at once, or at their own run_at if later) and are
# announced. Two successes of one dependent's last two dependencies, on two
# workers at once, update its row in turn: the second reads the first's
# count (READ COMMITTED re-reads a row it waited for), so the release
# happens once. Dependents are updated in id order, so that two such
# statements sharing several never deadlock. The values kept of the jobs
# that succeeded go into their dependents' parents.
RELEASE: Final = """,
{edges} AS (
    DELETE FROM {dependencies} AS e USING {source} AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
{released} AS (
    UPDATE {table} AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{{}}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{{}}') AS kept
              FROM {edges} AS e{values}
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM {edges})){spared}
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify({jobs_channel}, j.kind)::text END)"""
RELEASED_VALUES: Final = """
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id"""
NO_VALUES: Final = """
             CROSS JOIN (SELECT NULL::jsonb AS value) AS v"""
# A death or a cancellation: every waiting job below it goes (they all wait,
# since none of them can have started), each recorded as cancelled with the
# job whose end took it, and the dependency rows that led there with it (by
# their key: the rows of other dependencies of a job swept go when those
# end). A job with kept results is announced on the results channel. (The
# ids as an array, beside the join, make the plan read the table by its
# primary key, whatever the planner guesses of the rows: so does the
# release.)
SWEEP: Final = """,
{below} AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, {ended}
          FROM {dependencies} AS e JOIN {source} AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND {ended} IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM {dependencies} AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
{swept} AS (
    DELETE FROM {table} AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM {below} ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM {below}))
    RETURNING {leaving_but_error},
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify({results_channel}, j.id::text)::text END AS told),
{swept_edges} AS (
    DELETE FROM {dependencies} AS e USING {below} AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id)"""


def spared(sources: tuple[str, ...]) -> sql.Composable:
    """The release's condition that leaves alone the jobs that `sources`,
    ending jobs dead or cancelled in the same statement, cancel: a statement
    modifies a row once, and the cancel must win."""
    if not sources:
        return sql.SQL("")
    below = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT id FROM {}").format(cte(s, "below")) for s in sources
    )
    return sql.SQL("\n       AND j.id <> ALL(ARRAY({}))").format(below)


def follow_dependents(t: Table, leaving: Leaving) -> sql.Composable:
    """The leaving step of workflows: release the dependents of jobs that
    succeeded; cancel what waits below jobs that died or were cancelled."""
    # Imported here: the leaving steps import this module.
    from .leaving import Leaving, copy_to_history, keep_result

    source = leaving.source
    if leaving.outcome == "'succeeded'":
        return t.compose(
            RELEASE,
            source=sql.SQL(source),
            edges=cte(source, "edges"),
            released=cte(source, "released"),
            values=sql.SQL(RELEASED_VALUES if leaving.value == "v.value" else NO_VALUES),
            spared=spared(leaving.spared),
        )
    swept = f"{source}_swept"
    # The jobs swept leave the table too: copied to history, results kept.
    gone = Leaving(swept, "'cancelled'", error="d.last_error", history="cancelled")
    return t.compose(
        SWEEP,
        source=sql.SQL(source),
        swept=sql.SQL(swept),
        below=cte(source, "below"),
        swept_edges=cte(swept, "edges"),
        ended=sql.SQL("({})::text").format(sql.SQL(leaving.outcome)),
    ) + sql.Composed([copy_to_history(t, gone), keep_result(t, gone)])


# -- enqueue -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DependencyStatements(FeatureStatements):
    check: bytes
    enqueue: bytes
    enqueue_many: bytes
    dependents: bytes


@dataclass(frozen=True, slots=True)
class Group:
    """What `Queue.group` wrote: the group's jobs, and the job that runs
    after all of them succeeded (None if no ``then`` was given)."""

    ids: list[int]
    then: int | None = None


def check_dependencies(
    s: DependencyStatements, names: TableNames, depends_on: list[int]
) -> Plan[None]:
    """Refuse, before anything is written, dependencies that never existed,
    that are dead, or that are known to have died or been cancelled.

    An id that is not in the table counts as succeeded if the table's id
    sequence gave it out and no kept result says otherwise (docs/workflows.md
    says what this cannot tell apart)."""
    if not depends_on:
        return
    rows = yield Query(s.check, {"table": names.regclass, "depends_on": depends_on})
    for job_id, status, outcome, given_out in rows:
        if status == "dead":
            raise ValueError(f"depends_on: job {job_id} is dead; no job can wait for it")
        if status is None and outcome in ("dead", "cancelled"):
            raise ValueError(f"depends_on: job {job_id} ended {outcome}; no job can wait for it")
        if status is None and outcome is None and not given_out:
            raise ValueError(f"depends_on: job {job_id} does not exist and never did")


def insert_dependent(
    s: DependencyStatements,
    names: TableNames,
    spec: ValidatedSpec,
    trace_context: str | None,
) -> Plan[int]:
    """Write one job that depends on others (checked by `check_dependencies`)."""
    params = spec.row_params(trace_context, names.channel)
    params["depends_on"] = list(spec.depends_on)
    ((job_id, _, dead),) = yield Query(s.enqueue, params)
    if dead:
        # It died between the check and the lock: the caller's operation
        # (atomic) takes back what this wrote.
        raise ValueError(f"depends_on: job {dead[0]} is dead; no job can wait for it")
    return int(job_id)


def insert_dependents(
    s: DependencyStatements,
    names: TableNames,
    specs: list[ValidatedSpec],
    ids: list[int],
    db_now: Any,
    trace_context: str | None,
) -> Plan[None]:
    """Write jobs that depend on others (checked by `check_dependencies`), with
    the ids given out for them, in one statement."""
    pairs = [(i, p) for i, spec in zip(ids, specs, strict=True) for p in spec.depends_on]
    params: dict[str, Any] = {
        "id": ids,
        "kind": [d.kind for d in specs],
        "payload": [d.payload_json for d in specs],
        # run_at from the database's clock, as for every batch.
        "run_at": [d.run_at or db_now + d.delay for d in specs],
        "max_attempts": [d.max_attempts for d in specs],
        "queue": [d.queue for d in specs],
        "priority": [d.priority for d in specs],
        "result_ttl": [d.result_ttl for d in specs],
        "limit_key": [d.limit_key for d in specs],
        "trace_context": trace_context,
        "pair_job": [j for j, _ in pairs],
        "pair_parent": [p for _, p in pairs],
        "channel": names.channel,
    }
    ((_, dead, _),) = yield Query(s.enqueue_many, params)
    if dead:
        raise ValueError(f"depends_on: job {dead[0]} is dead; no job can wait for it")


def dependents(s: DependencyStatements, job_id: int) -> Operation[list[int]]:
    """The jobs that wait for `job_id` (while it is in the table)."""
    checked = validate_job_id(job_id, "job_id")
    return fetch(s.dependents, (checked,), lambda rows: [int(r[0]) for r in rows])
