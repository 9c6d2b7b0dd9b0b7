"""The claim: select, lock, mark and return a batch of jobs in one statement.

A claim serves some queues (those given, or every queue with pending jobs),
less the paused ones; takes higher priorities first; and within a priority,
the jobs due first. It reads the claim index (`UNLIMITED_INDEX`: queue,
priority, run_at, id) level by level, so that it reads O(batch) entries
whatever else the table holds:

1. the (queue, priority) levels with pending jobs, by a loose index scan:
   one probe per queue and per level (`max(priority)` below a level is the
   index's next level down);
2. the levels' priorities, highest first; for each, every level of that
   priority is read from its due end (`run_at <= now()`, so a level of jobs
   due tomorrow costs one probe), locked as read, and the earliest due of
   them taken. A priority whose levels hold the whole batch ends the walk:
   lower ones are never read.

With `kinds`, each level is read once per kind, so that a kind the worker
serves is found by an index range rather than by filtering past other
kinds; fast only with the kinds index (see docs/queues.md), which install()
does not build: it would slow every write.

A claim is a function of a frozen `ClaimSpec`, which is also the key its
rendering is kept by.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from psycopg import sql

from ..jobs import Job, validate_kinds, validate_limit, validate_queues
from ..plans import Operation, Plan, Query
from ..schema.predicates import ORPHANED
from .claim_heads import (
    AFTER_HEAD,
    HEADS_CTE,
    LEVEL_HEAD,
    every_queue_after_heads,
    levels_after_heads,
)
from .table import Table

__all__ = [
    "ClaimSpec",
    "ClaimStatements",
    "claim_statement",
    "claim_update",
    "limited_ctes",
    "served_by",
]

EVERY_QUEUE: Final = """
found(queue) AS (
    SELECT min(queue) FROM {table} WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM {table}
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL)"""
GIVEN_QUEUES: Final = """
found(queue) AS (SELECT unnest(%(queues)s::text[]))"""
LEVELS: Final = """
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
PICK: Final = """
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
# A worker's batch may stop at the job whose payload would take it past
# %(claim_bytes)s (stored size; the first job always comes): the worker holds
# about six times its batch's payloads in memory. Small uncompressed
# payloads: their stored size. Others: their size as text, which is what the
# worker receives.
PAYLOAD_SIZE: Final = (
    "CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL"
    " THEN pg_column_size(payload) ELSE octet_length(payload::text) END"
)
WITHIN_BUDGET: Final = """SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s"""
# Jobs held back by a limit (docs/limits.md) are not in the claim index: they
# are claimed by their key, one per free slot of it. Free slots are locked
# SKIP LOCKED, as the jobs are, so that two claims never take one slot, and
# the slot records the job and the attempt it is taken for: the statement
# that records that attempt's outcome frees it, and no other can. A key with
# no limit set runs one job at a time. These CTEs come first in a claim's
# WITH (a data-modifying CTE must be at the top); with no limits in use they
# read one empty index.
#
# A key with a rate (`set_rate`) has a token bucket in its limits row,
# refilled at `per_second` up to `burst`: a claim locks the buckets of the
# keys it may serve (SKIP LOCKED: a key whose bucket another claim holds is
# that claim's to serve), takes at most as many jobs as whole tokens, and
# writes back what is left (`spent`). FOR UPDATE reads a bucket as last
# committed, whatever the statement's snapshot: two claims never spend one
# token.
LIMITED: Final = """
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
SERVED_QUEUES: Final = """
                              AND NOT EXISTS (SELECT FROM {queues} AS q
                                               WHERE q.queue = t.queue AND q.paused)"""
# The claim proper: limited jobs first, then the rest of the batch. While no
# limit is in use (no slot exists), a worker's turn leaves the limited part
# out: a claim of jobs without a limit key is then what it was before limits
# existed (`Turns.limits_in_use`).
CLAIM: Final = """
UPDATE {table} AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY({limited_ids}ARRAY(
WITH RECURSIVE{heads}{found},{levels},{pick}
{take}{rest}))
RETURNING {jcols}"""
NO_ORPHANS: Final = sql.SQL("\n                     AND NOT coalesce({}, false)").format(ORPHANED)
# An orphaned job (`Job.orphaned`) runs alone, claimed by itself when the
# worker has nothing else; the worker's batches leave them out. Orphans are
# few: they are found through their own small index.
ORPHAN: Final = """
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


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """The shape of a claim: which parameters it takes, how many jobs, and
    what it claims. Frozen and hashable: the key its rendering is kept by.

    The batch size is written into the statement, not passed: with a
    parameter, PostgreSQL planned the claim anew at every execution (its
    generic plan, blind to the LIMIT, looked dearer), and planning took as
    long as the claim itself (docs/performance.md). Written in, the
    statement is planned once per connection and batch size.
    """

    queues: bool = False  # a ``queues`` parameter: only these queues
    kinds: bool = False  # a ``kinds`` parameter: only these kinds
    limit: int = 20
    # A ``claim_bytes`` parameter: the batch stops at the job whose payload
    # would take it past that.
    budget: bool = False
    # A worker's: it leaves orphaned jobs out of its batches.
    worker: bool = False
    # Jobs with a limit key too (at most `limited_max` of them; default:
    # `limit`); else only jobs without one.
    limited: bool = True
    limited_max: int | None = None
    # The jobs the turn's successes handed their slots to (`done_handed`),
    # claimed too.
    handed: bool = False
    # A ``heads`` parameter: each level starts after its head (`pgqueue.core.heads`).
    heads: bool = False


def served_by(t: Table, queues: bool, kinds: bool) -> sql.Composable:
    """Which limited jobs (rows ``t``) a claim with these parameters serves."""
    served = t.compose(SERVED_QUEUES)
    if queues:
        served += sql.SQL(" AND t.queue = ANY(%(queues)s::text[])")
    if kinds:
        served += sql.SQL(" AND t.kind = ANY(%(kinds)s::text[])")
    return served


def limited_ctes(t: Table, spec: ClaimSpec) -> sql.Composable:
    """The claim's CTEs of limited jobs (none unless `spec.limited`)."""
    if not spec.limited:
        return sql.SQL("")
    most = spec.limit if spec.limited_max is None else spec.limited_max
    return t.compose(LIMITED, served=served_by(t, spec.queues, spec.kinds), limit=sql.Literal(most))


def claim_update(t: Table, spec: ClaimSpec) -> sql.Composable:
    """The claim's UPDATE, which reads the CTEs of `limited_ctes`."""
    picked = t.compose(
        PICK,
        limit=sql.Literal(spec.limit),
        per_kind=sql.SQL(" CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)" if spec.kinds else ""),
        kind_filter=sql.SQL(" AND kind = k.kind" if spec.kinds else ""),
        orphans=NO_ORPHANS if spec.worker else sql.SQL(""),
        level_head=sql.SQL(LEVEL_HEAD if spec.heads else ""),
        after_head=sql.SQL(AFTER_HEAD if spec.heads else ""),
        size=sql.SQL(PAYLOAD_SIZE) if spec.budget else sql.SQL("0"),
    )
    if not spec.limited:
        limited_ids, rest = "", ""
    elif spec.handed:
        limited_ids = "ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || "
        rest = (
            "\n LIMIT greatest(0, {} - (SELECT count(*) FROM limited)"
            " - (SELECT count(*) FROM done_handed))"
        )
    else:
        limited_ids = "ARRAY(SELECT id FROM limited) || "
        rest = "\n LIMIT {} - (SELECT count(*) FROM limited)"
    return t.compose(
        CLAIM,
        heads=sql.SQL(HEADS_CTE if spec.heads else ""),
        found=_found(t, spec),
        levels=levels_after_heads(t) if spec.heads else t.compose(LEVELS),
        pick=picked,
        take=sql.SQL(WITHIN_BUDGET if spec.budget else "SELECT id FROM picked"),
        limited_ids=sql.SQL(limited_ids),
        rest=sql.SQL(rest).format(sql.Literal(spec.limit)),
    )


def _found(t: Table, spec: ClaimSpec) -> sql.Composable:
    """The queues the claim walks: those given, or every one with pending jobs."""
    if spec.queues:
        return t.compose(GIVEN_QUEUES)
    if not spec.heads:
        return t.compose(EVERY_QUEUE)
    return every_queue_after_heads(t)


def claim_statement(t: Table, spec: ClaimSpec) -> bytes:
    """A claim on its own (not in a worker's turn)."""
    update = claim_update(t, spec)
    if spec.limited:
        return sql.SQL("WITH{}{}").format(limited_ctes(t, spec), update).as_bytes(None)
    return update.as_bytes(None)


@dataclass(frozen=True, slots=True)
class ClaimStatements:
    # (queues, kinds) -> the claim of one orphaned job.
    orphan_claims: dict[tuple[bool, bool], bytes]

    @classmethod
    def of(cls, t: Table) -> ClaimStatements:
        return cls(
            orphan_claims={
                (q, k): t.render(
                    ORPHAN,
                    orphaned=ORPHANED,
                    queue_filter=sql.SQL("AND queue = ANY(%(queues)s::text[])" if q else ""),
                    kind_filter=sql.SQL("AND kind = ANY(%(kinds)s::text[])" if k else ""),
                )
                for q in (False, True)
                for k in (False, True)
            }
        )


def claim_params(
    limit: int, worker: str, kinds: Iterable[str] | None, queues: Iterable[str] | None = None
) -> dict[str, Any]:
    """A claim's validated parameters; ``kinds`` and ``queues`` are present
    only to filter by them."""
    limit = validate_limit(limit)
    kind_list = validate_kinds(kinds)
    queue_list = validate_queues(queues)
    if not isinstance(worker, str) or not worker or "\x00" in worker:
        raise ValueError("worker must be a non-empty str")
    params: dict[str, Any] = {"worker": worker, "limit": limit}
    if kind_list is not None:
        params["kinds"] = kind_list
    if queue_list is not None:
        params["queues"] = queue_list
    return params


def claim_jobs(statement: bytes, params: dict[str, Any]) -> Operation[list[Job]]:
    """A claim (`claim_statement`, or an orphan's) with its parameters."""

    def plan() -> Plan[list[Job]]:
        rows = yield Query(statement, params)
        return in_claim_order(map(Job.from_row, rows))

    return Operation(plan())


def in_claim_order(jobs: Iterable[Job]) -> list[Job]:
    # RETURNING promises no order; the claim's is priority (highest first), run_at, id.
    return sorted(jobs, key=lambda j: (-j.priority, j.run_at, j.id))


def explain(explain_claim: bytes) -> Operation[str]:
    """The claim's plan, with no row touched."""

    def plan() -> Plan[str]:
        rows = yield Query(explain_claim, {"worker": "explain"})
        return "\n".join(r[0] for r in rows)

    return Operation(plan())
