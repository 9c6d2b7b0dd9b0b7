"""Counting jobs without scanning the table: the one way every reader counts.

`stats()`, `queues()`, ``pgqueue stats``, the Prometheus collector and the
web dashboard all read their numbers through `tally`. On a table the planner
holds to be small, and that a scan stopping at `EXACT_ROWS` rows confirms,
it runs one ``GROUP BY``: every count exact. On a larger table each count
reads a partial index up to a cap (``SELECT count(*) FROM (SELECT 1 ...
WHERE <the index's predicate> LIMIT cap)``): the pending jobs without a limit
key by a walk of the claim index, one probe per (queue, priority), the
others through the index of their status (`counted_by`). A status whose read
stopped at the cap is estimated: what the planner holds the table to have,
less the statuses counted exactly, shared among the statuses past the cap by
the planner's estimate of each. Every count says which it is (`Count`).

Statuses are iterated, never listed: a status added to `ROW_STATUSES` is
counted (through ``status = '<it>'`` until `counted_by` names its index).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from psycopg import sql

from ..jobs import ROW_STATUSES, JobStatus
from ..plans import Plan, Query, Rows
from ..schema.predicates import (
    CLAIMABLE,
    DEAD_INDEX,
    LIMITED_INDEX,
    RUNNING,
    RUNNING_INDEX,
    WAITING_INDEX,
    Index,
)
from .table import FeatureStatements, Table

__all__ = [
    "CAP",
    "EXACT_ROWS",
    "MAX_GROUPS",
    "MAX_SHOWN",
    "Count",
    "CountStatements",
    "GroupCount",
    "Tally",
    "capped",
    "counted_by",
    "tally",
]

# A count stops at this many rows: "10,000+".
CAP: Final = 10_000
# A table with fewer rows than this is counted exactly, by queue, kind and status.
EXACT_ROWS: Final = 50_000
# (queue, priority) pairs of the claim index counted one by one, at most ...
MAX_SHOWN: Final = 200
# ... and looked into for the oldest ready job, at most.
MAX_GROUPS: Final = 2000


@dataclass(frozen=True, slots=True)
class Count:
    """A number of jobs: exact, at least (capped), or about (estimated)."""

    value: int
    capped: bool = False
    estimated: bool = False

    @property
    def exact(self) -> bool:
        return not (self.capped or self.estimated)

    def __str__(self) -> str:
        """``1,234``, ``10,000+`` or ``≈ 1.2M``.

        >>> str(Count(1234)), str(Count(10_000, capped=True)), str(Count(1_234_567, estimated=True))
        ('1,234', '10,000+', '≈ 1.2M')
        """
        if self.estimated:
            return f"≈ {_short(self.value)}"
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"

    def __add__(self, other: Count) -> Count:
        return Count(
            self.value + other.value,
            self.capped or other.capped,
            self.estimated or other.estimated,
        )


def _short(n: int) -> str:
    for size, unit in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def capped(n: int, cap: int | None = None) -> Count:
    """A count read with ``LIMIT cap + 1`` (`CAP` by default)."""
    cap = CAP if cap is None else cap
    return Count(min(n, cap), capped=n > cap)


@dataclass(frozen=True, slots=True)
class Counted:
    """A partial index that jobs of a status are counted through: its predicate,
    and its order (which makes the planner read the index even on stale
    statistics; None: no index, no order)."""

    predicate: str
    order: str | None

    @classmethod
    def of(cls, index: Index) -> Counted:
        return cls(index.predicate, index.columns)


def counted_by(status: JobStatus) -> tuple[Counted, ...]:
    """The partial indexes through which the jobs of a status are counted past
    `EXACT_ROWS` (pending jobs without a limit key are counted by the claim
    index's walk besides). A status with no index of its own is counted
    through ``status = '<it>'``: capped still, but give it an index (and an
    entry here) before tables grow."""
    known = {
        JobStatus.PENDING: (Counted.of(LIMITED_INDEX),),
        JobStatus.RUNNING: (Counted.of(RUNNING_INDEX),),
        JobStatus.DEAD: (Counted.of(DEAD_INDEX),),
        JobStatus.WAITING: (Counted.of(WAITING_INDEX),),
    }
    return known.get(status, (Counted(f"status = '{status.value}'", None),))


@dataclass(frozen=True, slots=True)
class GroupCount:
    """The jobs of one status in one queue, priority and kind (None: not read)."""

    queue: str
    priority: int
    kind: str | None
    status: JobStatus
    count: Count


@dataclass(frozen=True, slots=True)
class Tally:
    """What `tally` read: totals by status, and the groups it found."""

    exact: bool  # the table is small: every count is exact
    totals: dict[JobStatus, Count]
    groups: list[GroupCount]
    oldest_ready: timedelta | None
    expired: Count
    table_rows: Count
    more: bool = False  # pairs of the claim index beyond those counted

    def estimated(self) -> frozenset[JobStatus]:
        """The statuses whose totals are not exact."""
        return frozenset(s for s, c in self.totals.items() if not c.exact)


# Every count, exact: only for a table found to hold fewer than EXACT_ROWS
# rows. Counts by queue, priority, kind and status, the longest wait of a
# ready job, and the running jobs whose lease is older than the visibility
# timeout given.
STATS: Final = """
SELECT queue, priority, kind, status, count(*),
       now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now()),
       count(*) FILTER (WHERE status = 'running' AND locked_at < now() - %s::interval)
  FROM {table}
 GROUP BY queue, priority, kind, status"""
# The rows the planner holds the table to have (its statistics scaled to
# the table's size now): a plan, nothing read.
TABLE_ESTIMATE: Final = "EXPLAIN (FORMAT JSON) SELECT 1 FROM {table}"
# The table holds fewer than %s rows? A scan that stops there.
SIZED: Final = "SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT %s) AS s"
# The pending jobs without a limit key, up to a cap per (queue, priority):
# a walk of the claim index, one probe per pair (tagged -1).
PENDING_PAIRS: Final = f"""
(WITH RECURSIVE g AS (
    (SELECT queue, priority FROM {{table}} WHERE {CLAIMABLE} ORDER BY queue, priority LIMIT 1)
    UNION ALL
    SELECT n.queue, n.priority FROM g CROSS JOIN LATERAL (
        SELECT t.queue, t.priority FROM {{table}} AS t
         WHERE t.{CLAIMABLE} AND (t.queue, t.priority) > (g.queue, g.priority)
         ORDER BY t.queue, t.priority LIMIT 1) AS n
)
SELECT -1, g.queue, g.priority, NULL::text, c.n, NULL::numeric
  FROM (SELECT queue, priority FROM g LIMIT %(pairs)s) AS g
 CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM {{table}} AS t
         WHERE t.{CLAIMABLE} AND t.queue = g.queue AND t.priority = g.priority
         ORDER BY t.run_at, t.id LIMIT %(cap)s) AS s) AS c)"""
# The jobs one partial index holds, up to a cap, by queue, priority and
# kind, each group with the number read in all (tagged with the index's
# place in `counted_by`, status by status).
SAMPLE: Final = """
(SELECT {tag}, queue, priority, kind, count(*), sum(count(*)) OVER () FROM (
    SELECT queue, priority, kind FROM {table} WHERE {predicate}{order} LIMIT %(cap)s) AS s
 GROUP BY 2, 3, 4)"""
# What the planner holds a status to have: a plan, nothing read.
STATUS_ESTIMATE: Final = "EXPLAIN (FORMAT JSON) SELECT 1 FROM {table} WHERE status = {status}"
# The longest wait of a ready job without a limit key (the first entry of
# each (queue, priority) of the claim index, found by a walk), and the
# running jobs past their lease, up to a cap (the running index, by lock time).
OLDEST_AND_EXPIRED: Final = f"""
SELECT (WITH RECURSIVE g AS (
            (SELECT queue, priority FROM {{table}} WHERE {CLAIMABLE}
              ORDER BY queue, priority LIMIT 1)
            UNION ALL
            SELECT n.queue, n.priority FROM g CROSS JOIN LATERAL (
                SELECT t.queue, t.priority FROM {{table}} AS t
                 WHERE t.{CLAIMABLE} AND (t.queue, t.priority) > (g.queue, g.priority)
                 ORDER BY t.queue, t.priority LIMIT 1) AS n
        )
        SELECT now() - min(f.run_at) FROM (SELECT queue, priority FROM g LIMIT %(groups)s) AS g
         CROSS JOIN LATERAL (
            SELECT t.run_at FROM {{table}} AS t
             WHERE t.{CLAIMABLE} AND t.queue = g.queue AND t.priority = g.priority
             ORDER BY t.run_at LIMIT 1) AS f
         WHERE f.run_at <= now()),
       (SELECT count(*) FROM (
            SELECT 1 FROM {{table}}
             WHERE {RUNNING} AND locked_at < now() - %(lease)s::interval
             ORDER BY locked_at LIMIT %(cap)s) AS s)"""
# The queues' pause records, by name, up to %s of them.
PAUSE_RECORDS: Final = "SELECT queue, paused FROM {queues} ORDER BY queue LIMIT %s"


def _counted() -> list[tuple[JobStatus, Counted]]:
    """Every index of `counted_by`, status by status: the tags of the ``counted`` statement."""
    return [(status, c) for status in ROW_STATUSES for c in counted_by(status)]


def _counted_statement(t: Table) -> bytes:
    """One statement for every capped read: the claim index's walk, then each
    index of `counted_by` (UNION ALL), each row tagged with what it read."""
    branches = [t.compose(PENDING_PAIRS)] + [
        t.compose(
            SAMPLE,
            tag=sql.Literal(tag),
            predicate=sql.SQL(c.predicate),
            order=sql.SQL("" if c.order is None else f" ORDER BY {c.order}"),
        )
        for tag, (_, c) in enumerate(_counted())
    ]
    return sql.SQL("\nUNION ALL").join(branches).as_bytes(None)


@dataclass(frozen=True, slots=True)
class CountStatements(FeatureStatements):
    stats: bytes
    table_estimate: bytes
    sized: bytes
    counted: bytes
    status_estimates: dict[str, bytes] = field(hash=False)
    oldest_and_expired: bytes
    pause_records: bytes

    @classmethod
    def special(cls, t: Table) -> dict[str, Any]:
        return {
            "counted": _counted_statement(t),
            "status_estimates": {
                status.value: t.render(STATUS_ESTIMATE, status=sql.Literal(status.value))
                for status in ROW_STATUSES
            },
        }


def tally(
    s: CountStatements,
    visibility_timeout: timedelta,
    *,
    cap: int | None = None,
    exact_rows: int | None = None,
    pairs: int | None = None,
) -> Plan[Tally]:
    """Count the table's jobs, exactly when it is small, else capped and estimated."""
    cap = CAP if cap is None else cap
    exact_rows = EXACT_ROWS if exact_rows is None else exact_rows
    pairs = MAX_SHOWN + 1 if pairs is None else pairs
    planned = _plan_rows((yield Query(s.table_estimate)))
    size = exact_rows + 1
    if planned < 4 * exact_rows:
        # The statistics may be stale: look (a scan that stops early).
        ((size,),) = yield Query(s.sized, (exact_rows + 1,))
    if size <= exact_rows:
        return _exact((yield Query(s.stats, (visibility_timeout,))), size)
    groups: list[GroupCount] = []
    read = dict.fromkeys(ROW_STATUSES, Count(0))
    counted = _counted()
    whole = [0] * len(counted)
    walked = 0
    for tag, queue, priority, kind, n, total in (
        yield Query(s.counted, {"pairs": pairs, "cap": cap + 1})
    ):
        if tag < 0:  # the claim index's walk
            count = capped(n, cap)
            groups.append(GroupCount(queue, priority, None, JobStatus.PENDING, count))
            read[JobStatus.PENDING] += count
            walked += 1
        else:
            status = counted[tag][0]
            whole[tag] = int(total)
            groups.append(GroupCount(queue, priority, kind, status, Count(n, int(total) > cap)))
    for (status, _), n in zip(counted, whole, strict=True):
        read[status] += capped(n, cap)
    more = walked >= pairs
    if more:
        read[JobStatus.PENDING] = Count(read[JobStatus.PENDING].value, capped=True)
    over = [status for status, count in read.items() if not count.exact]
    weights: dict[JobStatus, float] = dict.fromkeys(over, 1.0)
    if len(over) > 1:
        for status in over:
            rows = yield Query(s.status_estimates[status.value])
            weights[status] = max(_plan_rows(rows), 1)
    totals = _estimates(read, weights, planned)
    ((oldest, expired),) = yield Query(
        s.oldest_and_expired, {"groups": MAX_GROUPS, "lease": visibility_timeout, "cap": cap + 1}
    )
    rows_now = max(planned, size, sum(c.value for c in totals.values()))
    return Tally(
        exact=False,
        totals=totals,
        groups=groups,
        oldest_ready=oldest,
        expired=capped(expired, cap),
        table_rows=Count(rows_now, estimated=True),
        more=more,
    )


def _estimates(
    read: dict[JobStatus, Count], weights: dict[JobStatus, float], planned: int
) -> dict[JobStatus, Count]:
    """Each status past the cap gets its share (by `weights`) of what the
    planner holds the table to have, less the statuses counted exactly; never
    less than was read (then it stays "at least")."""
    totals = {status: count for status, count in read.items() if count.exact}
    rest = planned - sum(c.value for c in totals.values())
    whole = sum(weights.values())
    for status, weight in weights.items():
        share = int(rest * weight / whole) if whole else 0
        least = read[status]
        totals[status] = Count(share, estimated=True) if share > least.value else least
    return {status: totals[status] for status in read}


def _plan_rows(rows: Rows) -> int:
    """The rows an ``EXPLAIN (FORMAT JSON)`` says its plan returns."""
    doc: Any = rows[0][0]
    if isinstance(doc, str):
        doc = json.loads(doc)
    return int(doc[0]["Plan"]["Plan Rows"])


def _exact(rows: Rows, size: int) -> Tally:
    totals = dict.fromkeys(ROW_STATUSES, 0)
    groups: list[GroupCount] = []
    ages = []
    expired = 0
    for queue, priority, kind, status, n, age, past_lease in rows:
        st = JobStatus(status)
        totals[st] += n
        groups.append(GroupCount(queue, priority, kind, st, Count(n)))
        if age is not None:
            ages.append(age)
        expired += past_lease
    return Tally(
        exact=True,
        totals={status: Count(n) for status, n in totals.items()},
        groups=groups,
        oldest_ready=max(ages, default=None),
        expired=Count(expired),
        table_rows=Count(size),
    )


def by(groups: list[GroupCount], key: str) -> Iterator[tuple[Any, JobStatus, Count]]:
    """The groups' counts summed by ``queue``, ``kind`` or ``priority`` and status
    (groups whose kind was not read are left out of ``kind``)."""
    sums: dict[tuple[Any, JobStatus], Count] = {}
    for g in groups:
        value = getattr(g, key)
        if value is None:
            continue
        sums[(value, g.status)] = sums.get((value, g.status), Count(0)) + g.count
    for (value, status), count in sums.items():
        yield value, status, count
