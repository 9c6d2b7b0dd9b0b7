"""What the web dashboard reads and decides, with no I/O (see `pgqueue.web`).

Every statement here is short whatever the table's size: it reads an index
in O(page) or O(cap), or the catalogs, never the whole job table (except
for exact counts of a table found to hold fewer than `EXACT_ROWS` rows).
Nor does what it reads grow with the data that anyone who may enqueue
controls: a list reads each payload's stored size and, for a payload
stored in at most `LISTED_BYTES`, the first `PREVIEW_CHARS` of its JSON
text (writing a large value as text is what costs); a job's page reads the
first `DETAIL_CHARS`; every list of groups and queues stops at `MAX_SHOWN`.
Large counts are capped (`Count.capped`: shown as "10,000+") or estimated
from the planner's statistics (`Count.estimated`: "≈ 1.2M"). Pages go by
keyset (``id < before``), never by OFFSET. The dashboard runs them on
autocommit connections under a ``statement_timeout`` (`SESSION_SETTINGS`),
so that no snapshot it takes stays open.

Actions (retry, purge, cancel, pause ...) are the queue's own operations
(`pgqueue.core.ops.QueueCore`), plus `purge` of dead jobs by id and the
batched "every dead job matching this filter" plans defined here.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from psycopg import sql

from .jobs import (
    DEFAULT_VISIBILITY_TIMEOUT,
    MAX_NAME_LENGTH,
    ROW_STATUSES,
    Job,
    JobStatus,
    validate_ids,
    validate_job_id,
    validate_kind,
    validate_queue,
    validate_status,
)
from .jsontext import load_json
from .ops import QueueCore
from .plans import Operation, Plan, Query
from .schema.columns import HISTORY_COLUMNS, JOB_COLUMNS
from .schema.columns import job_columns as _read
from .schema.predicates import CLAIMABLE, DEAD, LIMITED, RUNNING

__all__ = [
    "CAP",
    "EXACT_ROWS",
    "PAGE_SIZE",
    "READ_ONLY_SETTINGS",
    "SESSION_SETTINGS",
    "BadFilter",
    "Count",
    "DashboardCore",
    "Group",
    "JobDetail",
    "JobFilter",
    "JobPage",
    "Overview",
    "Preview",
    "QueueRow",
    "Throughput",
]

# A count stops at this many rows: "10,000+".
CAP: Final = 10_000
# A table with fewer rows than this is counted exactly, by queue, kind and status.
EXACT_ROWS: Final = 50_000
# Jobs per page of the browser, the dead jobs and the running jobs.
PAGE_SIZE: Final = 50
# Jobs an action on "every dead job matching the filter" handles per statement.
BATCH: Final = 500
# (queue, priority) pairs the oldest ready job is looked for in, at most.
MAX_GROUPS: Final = 2000
# Rows of a group or queue list on a page, at most ("and more"); the queues
# with pending jobs are found by a walk of the claim index, one probe each.
MAX_SHOWN: Final = 200
# A list shows the start of a payload stored in at most this many bytes ...
LISTED_BYTES: Final = 16_384
# ... this many characters of its JSON text, and of an error this many.
PREVIEW_CHARS: Final = 200
ERROR_CHARS: Final = 2000
# A job's page shows this many characters of its payload, result and error.
DETAIL_CHARS: Final = 65_536
# The largest id a bigint holds: ids are 1 to this.
MAX_JOB_ID: Final = 2**63 - 1
# A payload filter: at most this long and this deep.
MAX_FILTER_CHARS: Final = 4096
MAX_FILTER_DEPTH: Final = 32

# Set on every connection the dashboard opens: no statement runs longer than
# this, no lock is waited for long, a session never idles in a transaction
# (the dashboard runs in autocommit; this is the safety net), and no request
# takes parallel workers from the server.
SESSION_SETTINGS: Final[Mapping[str, str]] = {
    "statement_timeout": "2s",
    "lock_timeout": "1s",
    "idle_in_transaction_session_timeout": "5s",
    "max_parallel_workers_per_gather": "0",
    "application_name": "pgqueue-dashboard",
}
# Added for a read-only dashboard: the database refuses its writes too.
READ_ONLY_SETTINGS: Final[Mapping[str, str]] = {"default_transaction_read_only": "on"}


class BadFilter(ValueError):
    """A filter of the job browser that cannot be used (a clear message, nothing run)."""


@dataclass(frozen=True, slots=True)
class Count:
    """A number of jobs as the dashboard knows it: exact, at least (capped), or about."""

    value: int
    capped: bool = False
    estimated: bool = False

    def __str__(self) -> str:
        """``1,234``, ``10,000+`` or ``≈ 1.2M``.

        >>> str(Count(1234)), str(Count(10_000, capped=True)), str(Count(1_234_567, estimated=True))
        ('1,234', '10,000+', '≈ 1.2M')
        """
        if self.estimated:
            return f"≈ {_short(self.value)}"
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"


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
class Group:
    """Jobs of one queue and kind, by status."""

    queue: str
    kind: str | None  # None: the queue's pending jobs, whose kinds were not counted
    counts: dict[JobStatus, Count]


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A queue on the overview and the queues page."""

    name: str
    paused: bool
    pending: Count
    running: Count
    dead: Count


@dataclass(frozen=True, slots=True)
class Overview:
    """The overview page's numbers, all read by short statements."""

    now: datetime
    exact: bool  # the table is small: every count is exact
    totals: dict[JobStatus, Count]
    groups: list[Group]  # the first `MAX_SHOWN`, by queue and kind
    queues: list[QueueRow]  # the first `MAX_SHOWN`, by name
    more_groups: bool  # there are groups beyond those shown
    more_queues: bool
    oldest_ready: timedelta | None
    expired: Count
    table_rows: Count
    inserted: int | None  # pg_stat_user_tables' counters, for `Throughput`
    deleted: int | None


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The job browser's filters (all optional), validated.

    >>> JobFilter.parse({"status": "dead", "payload": '{"order": 7}'}).payload
    '{"order": 7}'
    """

    status: JobStatus | None = None
    queue: str | None = None
    kind: str | None = None
    unique_key: str | None = None
    payload: str | None = None  # JSON text: jobs whose payload contains it (``@>``)

    @classmethod
    def parse(cls, values: Mapping[str, str]) -> JobFilter:
        """Filters from a query string's values (empty means unset); `BadFilter` if one is wrong."""

        def given(name: str) -> str | None:
            value = values.get(name, "").strip()
            return value or None

        try:
            status = given("status")
            queue = given("queue")
            kind = given("kind")
            unique_key = given("unique_key")
            payload = given("payload")
            if unique_key is not None and (
                len(unique_key) > MAX_NAME_LENGTH or "\x00" in unique_key
            ):
                raise ValueError(f"unique key must be at most {MAX_NAME_LENGTH} characters")
            if payload is not None:
                if len(payload) > MAX_FILTER_CHARS:
                    raise ValueError(f"payload filter is longer than {MAX_FILTER_CHARS} characters")
                doc = load_json(payload, "payload filter", max_depth=MAX_FILTER_DEPTH)
                if "\x00" in payload or "\\u0000" in payload:
                    raise ValueError("payload filter holds a NUL character")
                payload = json.dumps(doc)
            return cls(
                status=None if status is None else validate_status(status),
                queue=None if queue is None else validate_queue(queue),
                kind=None if kind is None else validate_kind(kind),
                unique_key=unique_key,
                payload=payload,
            )
        except (TypeError, ValueError) as exc:
            raise BadFilter(str(exc)) from None

    def as_query(self) -> dict[str, str]:
        """The filters set, as query string values."""
        out = {
            "status": self.status.value if self.status else None,
            "queue": self.queue,
            "kind": self.kind,
            "unique_key": self.unique_key,
            "payload": self.payload,
        }
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True, slots=True)
class Preview:
    """The start of a JSON value's text, as PostgreSQL writes ``jsonb``, and its stored size.

    >>> print(Preview('{"a": 1}', 9, True).pretty())
    {
      "a": 1
    }
    >>> Preview('{"a": "xxxx', 90_000, False).pretty()
    '{"a": "xxxx'
    """

    text: str | None  # None: too large for a list to show
    size: int  # bytes the value takes in the table (``pg_column_size``: compressed)
    whole: bool  # the text is the whole value

    def pretty(self) -> str:
        """The value indented when the text is whole (and Python can read it), else the text."""
        if self.text is None or not self.whole:
            return self.text or ""
        try:
            return json.dumps(json.loads(self.text), indent=2, ensure_ascii=False, sort_keys=True)
        except (ValueError, RecursionError):
            return self.text


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of jobs, newest first; `next_before` continues after its last one.

    A listed job's ``payload`` is None and its ``last_error`` cut at
    `ERROR_CHARS`: ``previews[job.id]`` holds the start of its payload."""

    jobs: list[Job]
    next_before: int | None
    now: datetime
    previews: dict[int, Preview] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """A copy of the job the history table kept when it left the queue."""

    outcome: str
    attempts: int
    last_error: str | None
    locked_by: str | None
    finished_at: datetime


@dataclass(frozen=True, slots=True)
class ResultRow:
    """The result kept for the job (``result_ttl``)."""

    outcome: str
    value: Preview | None  # the start of the value's JSON text
    error: str | None  # cut at `DETAIL_CHARS`
    attempts: int
    finished_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class JobDetail:
    """Everything the dashboard knows of one job."""

    job_id: int
    job: Job | None  # its payload None (see `payload`), its error cut at `DETAIL_CHARS`
    payload: Preview | None  # the start of the payload's JSON text
    result: ResultRow | None
    history: list[HistoryRow]
    slot: tuple[str, int] | None  # the limit slot it holds: key, slot number
    now: datetime
    results_readable: bool = True  # the dashboard's role may read the results table
    history_readable: bool = True  # ... and the history table
    dependents: tuple[int, ...] = ()  # the jobs that wait for it (depends_on), the first 100


@dataclass
class Throughput:
    """Jobs enqueued and jobs that left the table, per minute, from samples of
    the table's cumulative counters (``pg_stat_user_tables``).

    The samples live in the dashboard's process: the chart covers the time
    the dashboard has been watching, up to `minutes`. A counter that went
    back (statistics reset, server restart) starts a new series.

    >>> t = Throughput()
    >>> t.add(datetime(2025, 1, 1, 12, 0, 0), 100, 50)
    >>> t.add(datetime(2025, 1, 1, 12, 0, 30), 160, 80)
    >>> t.per_minute()[-1][1:]
    (60, 30)
    """

    minutes: int = 60
    every: timedelta = timedelta(seconds=5)
    samples: deque[tuple[datetime, int, int]] = field(default_factory=deque)
    # Per minute: (enqueued, left); written by `add` only.
    buckets: dict[datetime, tuple[int, int]] = field(default_factory=dict)

    def add(self, at: datetime, inserted: int, deleted: int) -> None:
        """Record the counters read at ``at`` (the database's clock)."""
        if self.samples:
            last_at, last_ins, last_del = self.samples[-1]
            if at - last_at < self.every:
                return
            if inserted >= last_ins and deleted >= last_del and at > last_at:
                minute = at.replace(second=0, microsecond=0)
                ins, dele = self.buckets.get(minute, (0, 0))
                self.buckets[minute] = (ins + inserted - last_ins, dele + deleted - last_del)
        self.samples.append((at, inserted, deleted))
        horizon = at - timedelta(minutes=self.minutes + 1)
        while self.samples and self.samples[0][0] < horizon:
            self.samples.popleft()
        for minute in [m for m in self.buckets if m < horizon]:
            del self.buckets[minute]

    def per_minute(self) -> list[tuple[datetime, int, int]]:
        """The last `minutes` minutes up to the last sample: (minute, enqueued, left)."""
        if not self.samples:
            return []
        end = self.samples[-1][0].replace(second=0, microsecond=0)
        out = []
        for i in range(self.minutes - 1, -1, -1):
            minute = end - timedelta(minutes=i)
            ins, dele = self.buckets.get(minute, (0, 0))
            out.append((minute, ins, dele))
        return out

    @property
    def since(self) -> datetime | None:
        """When the oldest sample kept was taken."""
        return self.samples[0][0] if self.samples else None


class DashboardCore:
    """The dashboard's statements and plans for one queue table."""

    def __init__(self, table: str = "pgqueue_jobs", *, history: bool = False) -> None:
        self.queue = QueueCore(table, history=history)
        n = self.queue.schema
        t = n.table
        self._t = t
        self.regclass = self.queue.schema.regclass
        names: dict[str, sql.Composable] = {
            "table": t,
            "cols": _read(),
            "shown": _listed(DETAIL_CHARS),
            "listed_text": sql.SQL(
                "CASE WHEN pg_column_size(payload) <= {} THEN payload::text END"
            ).format(sql.Literal(LISTED_BYTES)),
            "detail": sql.Literal(DETAIL_CHARS),
            "queues": n.queues,
            "history": n.history,
            "results": n.results,
            "slots": n.limit_slots,
            "running": sql.SQL(RUNNING),
            "dead": sql.SQL(DEAD),
        }
        self._names = names

        def render(template: str) -> bytes:
            return sql.SQL(template).format(**names).as_bytes(None)

        self._render = render
        # May the dashboard's role read the results and history tables
        # (named here as text, for has_table_privilege)?
        self.readable = (
            b"SELECT has_table_privilege(to_regclass(%s), 'SELECT'),"
            b" has_table_privilege(to_regclass(%s), 'SELECT')"
        )
        self.side_tables = tuple(names[n].as_string(None) for n in ("results", "history"))
        # The table holds fewer than %s rows? A scan that stops there.
        self.sized = render("SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT %s) AS s")
        # The clock, the planner's estimate of the table's rows, and the
        # table's cumulative counters of rows inserted and deleted (what
        # pg_stat_user_tables shows as n_tup_ins and n_tup_del), for the
        # throughput chart: catalog reads.
        self.reltuples = (
            b"SELECT now(), greatest(reltuples, 0)::bigint, pg_stat_get_tuples_inserted(oid),"
            b" pg_stat_get_tuples_deleted(oid) FROM pg_class WHERE oid = %s::regclass"
        )
        # Exact counts: only when `sized` found a small table. Of however
        # many queues and kinds, the first %s are counted by group.
        self.totals = render("SELECT status, count(*) FROM {table} GROUP BY 1")
        self.groups = render("""
SELECT queue, kind, status, count(*) FROM {table}
 WHERE (queue, kind) IN (SELECT DISTINCT queue, kind FROM {table} ORDER BY 1, 2 LIMIT %s)
 GROUP BY 1, 2, 3 ORDER BY 1, 2""")
        self.queue_counts = render("""
SELECT queue, status, count(*) FROM {table}
 WHERE queue IN (SELECT DISTINCT queue FROM {table} ORDER BY 1 LIMIT %s)
 GROUP BY 1, 2 ORDER BY 1""")
        # Running jobs (their partial index) and dead jobs, up to a cap, by
        # queue and kind: the first groups, each with the count of all.
        self.running_groups = render("""
SELECT queue, kind, n, sum(n) OVER () FROM (
    SELECT queue, kind, count(*) AS n FROM (
        SELECT queue, kind FROM {table}
         WHERE {running} LIMIT %s) AS s
     GROUP BY 1, 2) AS g
 ORDER BY 1, 2 LIMIT %s""")
        self.dead_groups = render("""
SELECT queue, kind, n, sum(n) OVER () FROM (
    SELECT queue, kind, count(*) AS n FROM (
        SELECT queue, kind FROM {table} WHERE {dead} LIMIT %s) AS s
     GROUP BY 1, 2) AS g
 ORDER BY 1, 2 LIMIT %s""")
        # Pending jobs live in two partial indexes (migration 8): those
        # without a limit key in the claim index, by (queue, priority,
        # run_at, id); limited ones by (limit_key, priority, run_at, id).
        # Each queue with unlimited pending jobs is found by a walk of the
        # claim index (one probe per queue) and its jobs counted up to a
        # cap; limited pending jobs are counted up to a cap, by queue.
        unlimited = CLAIMABLE
        self.pending_queues = render(f"""
WITH RECURSIVE q AS (
    (SELECT queue FROM {{table}} WHERE {unlimited} ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT t.queue FROM {{table}} AS t
             WHERE t.{unlimited} AND t.queue > q.queue ORDER BY t.queue LIMIT 1)
      FROM q WHERE q.queue IS NOT NULL
)
SELECT q.queue, false, c.n, NULL::numeric
  FROM (SELECT queue FROM q WHERE queue IS NOT NULL LIMIT %(queues)s) AS q
 CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM {{table}} AS t WHERE t.{unlimited} AND t.queue = q.queue
         LIMIT %(cap)s) AS s) AS c
UNION ALL
(SELECT queue, true, count(*), sum(count(*)) OVER () FROM (
    SELECT queue FROM {{table}} WHERE {LIMITED}
     LIMIT %(cap)s) AS l
 GROUP BY queue ORDER BY queue LIMIT %(queues)s)""")
        self.pause_records = render("SELECT queue, paused FROM {queues} ORDER BY queue LIMIT %s")
        # The longest wait of a ready job without a limit key: the first
        # entry of each (queue, priority) of the claim index, found by a
        # walk (one probe per pair).
        self.oldest_ready = render(f"""
WITH RECURSIVE g AS (
    (SELECT queue, priority FROM {{table}} WHERE {unlimited} ORDER BY queue, priority LIMIT 1)
    UNION ALL
    SELECT n.queue, n.priority FROM g CROSS JOIN LATERAL (
        SELECT t.queue, t.priority FROM {{table}} AS t
         WHERE t.{unlimited} AND (t.queue, t.priority) > (g.queue, g.priority)
         ORDER BY t.queue, t.priority LIMIT 1) AS n
)
SELECT now() - min(f.run_at) FROM (SELECT queue, priority FROM g LIMIT %s) AS g
 CROSS JOIN LATERAL (
    SELECT t.run_at FROM {{table}} AS t
     WHERE t.{unlimited} AND t.queue = g.queue AND t.priority = g.priority
     ORDER BY t.run_at LIMIT 1) AS f
 WHERE f.run_at <= now()""")
        self.expired = render("""
SELECT count(*) FROM (
    SELECT 1 FROM {table}
     WHERE {running} AND locked_at < now() - %s::interval
     LIMIT %s) AS s""")
        # A job's page: the start of its payload, its result's value and its
        # error (each JSON text is made once, in the subquery).
        self.detail_job = render("""
SELECT {shown}, left(s.payload_text, {detail}), s.payload_size,
       length(s.payload_text) <= {detail}
  FROM (SELECT {cols}, payload::text AS payload_text, pg_column_size(payload) AS payload_size
          FROM {table} WHERE id = %s LIMIT 1) AS s""")
        self.detail_result = render("""
SELECT outcome, left(v, {detail}), size, length(v) <= {detail}, left(error, {detail}),
       attempts, finished_at, expires_at
  FROM (SELECT outcome, value::text AS v, pg_column_size(value) AS size, error, attempts,
               finished_at, expires_at
          FROM {results} WHERE job_id = %s LIMIT 1) AS s""")
        self.payload_text = render("SELECT payload::text FROM {table} WHERE id = %s")
        self.detail_history = render("""
SELECT outcome, attempts, left(last_error, {detail}), locked_by, finished_at FROM {history}
 WHERE id = %s ORDER BY finished_at DESC LIMIT 20""")
        self.detail_slot = render("SELECT limit_key, slot FROM {slots} WHERE job_id = %s LIMIT 1")
        # The jobs that wait for it, where the dashboard's role may read them.
        self.dependencies_readable = b"SELECT has_table_privilege(to_regclass(%s), 'SELECT')"
        self.dependencies_table = n.dependencies.as_string(None)
        self.detail_dependents = (
            sql.SQL("SELECT job_id FROM {} WHERE parent_id = %s ORDER BY job_id LIMIT 100")
            .format(n.dependencies)
            .as_bytes(None)
        )
        self.running_page = _listing(
            sql.SQL("""SELECT {cols}, {listed_text} AS payload_text,
       pg_column_size(payload) AS payload_size FROM {table}
 WHERE {running}
   AND (%(after_at)s::timestamptz IS NULL OR (locked_at, id) > (%(after_at)s, %(after_id)s))
 ORDER BY locked_at, id LIMIT %(limit)s""").format(**names),
            sql.SQL("s.locked_at, s.id"),
        )
        gone = HISTORY_COLUMNS if history else ("id",)
        keep = ""
        if history:
            cols = ", ".join(gone)
            keep = (
                f", kept AS (INSERT INTO {{history}} ({cols}, outcome)"
                f" SELECT {cols}, 'dead' FROM purged)"
            )
        # Dead jobs by id go for good (copied to the history when it is on).
        self.purge_ids = render(f"""
WITH purged AS (
    DELETE FROM {{table}} WHERE id = ANY(%s::bigint[]) AND status = 'dead'
    RETURNING {", ".join(gone)}){keep}
SELECT coalesce(array_agg(id ORDER BY id), '{{{{}}}}') FROM purged""")

    # -- reads ------------------------------------------------------------

    def overview(
        self, visibility_timeout: timedelta = DEFAULT_VISIBILITY_TIMEOUT
    ) -> Operation[Overview]:
        """The overview's numbers: exact on a small table, capped or estimated on a large one."""

        def plan() -> Plan[Overview]:
            ((now, reltuples, inserted, deleted),) = yield Query(self.reltuples, (self.regclass,))
            size = reltuples
            if reltuples < 4 * EXACT_ROWS:
                # Small, or its statistics are stale: look (a scan that stops early).
                ((size,),) = yield Query(self.sized, (EXACT_ROWS + 1,))
            exact = size <= EXACT_ROWS
            groups: dict[tuple[str, str | None], dict[JobStatus, Count]] = {}
            queues: dict[str, dict[JobStatus, Count]] = {}

            def add(queue: str, kind: str | None, status: JobStatus, count: Count) -> None:
                for counts in (groups.setdefault((queue, kind), {}), queues.setdefault(queue, {})):
                    was = counts.get(status, Count(0))
                    counts[status] = Count(was.value + count.value, was.capped or count.capped)

            totals: dict[JobStatus, Count]
            if exact:
                rows = yield Query(self.totals)
                sums = dict.fromkeys(ROW_STATUSES, 0) | {JobStatus(s): n for s, n in rows}
                totals = {s: Count(n) for s, n in sums.items()}
                rows = yield Query(self.groups, (MAX_SHOWN + 1,))
                for queue, kind, status, n in rows:
                    groups.setdefault((queue, kind), {})[JobStatus(status)] = Count(n)
                rows = yield Query(self.queue_counts, (MAX_SHOWN + 1,))
                for queue, status, n in rows:
                    queues.setdefault(queue, {})[JobStatus(status)] = Count(n)
                table_rows = Count(size)
            else:
                totals = {}
                for status, statement in (
                    (JobStatus.RUNNING, self.running_groups),
                    (JobStatus.DEAD, self.dead_groups),
                ):
                    rows = yield Query(statement, (CAP + 1, MAX_SHOWN + 1))
                    total = int(rows[0][3]) if rows else 0
                    for queue, kind, n, _ in rows:
                        add(queue, kind, status, Count(n, capped=total > CAP))
                    totals[status] = capped(total)
                rows = yield Query(self.pending_queues, {"queues": MAX_SHOWN + 1, "cap": CAP + 1})
                pending_total = 0
                limited_total = next((int(t) for _, limited, _, t in rows if limited), 0)
                for queue, limited, n, _ in rows:
                    count = Count(n, capped=limited_total > CAP) if limited else capped(n)
                    add(queue, None, JobStatus.PENDING, count)
                    pending_total += n
                others = totals[JobStatus.RUNNING].value + totals[JobStatus.DEAD].value
                if pending_total > CAP and reltuples > others:
                    totals[JobStatus.PENDING] = Count(reltuples - others, estimated=True)
                else:
                    totals[JobStatus.PENDING] = Count(pending_total)
                table_rows = Count(max(reltuples, size), estimated=True)
            pauses = yield Query(self.pause_records, (MAX_SHOWN + 1,))
            paused: dict[str, bool] = dict(pauses)
            names = sorted(set(queues) | set(paused))
            more_queues = len(names) > MAX_SHOWN
            names = names[:MAX_SHOWN]
            shown = sorted(groups.items(), key=lambda item: (item[0][0], item[0][1] or ""))
            zero = Count(0)
            queue_rows = [
                QueueRow(
                    name,
                    bool(paused.get(name, False)),
                    queues.get(name, {}).get(JobStatus.PENDING, zero),
                    queues.get(name, {}).get(JobStatus.RUNNING, zero),
                    queues.get(name, {}).get(JobStatus.DEAD, zero),
                )
                for name in names
            ]
            ((oldest,),) = yield Query(self.oldest_ready, (MAX_GROUPS,))
            ((expired,),) = yield Query(self.expired, (visibility_timeout, CAP + 1))
            return Overview(
                now=now,
                exact=exact,
                totals=totals,
                groups=[Group(queue, kind, counts) for (queue, kind), counts in shown[:MAX_SHOWN]],
                queues=queue_rows,
                more_groups=len(shown) > MAX_SHOWN,
                more_queues=more_queues,
                oldest_ready=oldest,
                expired=capped(expired),
                table_rows=table_rows,
                inserted=inserted,
                deleted=deleted,
            )

        return Operation(plan())

    def jobs(
        self, where: JobFilter, *, before: int | None = None, limit: int = PAGE_SIZE
    ) -> Operation[JobPage]:
        """A page of jobs matching ``where``, newest first, before the id ``before``."""
        if before is not None:
            before = check_job_id(before, "before")
        conditions, params = self._conditions(where)
        if before is not None:
            conditions.append(sql.SQL("id < %(before)s"))
            params["before"] = before
        params["limit"] = limit + 1
        statement = _listing(
            sql.SQL(
                "SELECT {cols}, {listed_text} AS payload_text,"
                " pg_column_size(payload) AS payload_size FROM {table} WHERE {where}"
                " ORDER BY id DESC LIMIT %(limit)s"
            ).format(where=sql.SQL(" AND ").join(conditions), **self._names),
            sql.SQL("s.id DESC"),
        )
        return Operation(_page(statement, params, limit))

    def _conditions(self, where: JobFilter) -> tuple[list[sql.Composable], dict[str, Any]]:
        # Literal status (not a parameter): a partial index's predicate must be provable.
        conditions: list[sql.Composable] = [sql.SQL("true")]
        params: dict[str, Any] = {}
        if where.status is not None:
            conditions.append(sql.SQL("status = {}").format(sql.Literal(where.status.value)))
            if where.status is JobStatus.RUNNING:
                conditions.append(sql.SQL("locked_at IS NOT NULL"))
        for column in ("queue", "kind", "unique_key"):
            value = getattr(where, column)
            if value is not None:
                conditions.append(
                    sql.SQL("{} = %({})s").format(sql.Identifier(column), sql.SQL(column))
                )
                params[column] = value
        if where.payload is not None:
            conditions.append(sql.SQL("payload @> %(payload)s::jsonb"))
            params["payload"] = where.payload
        return conditions, params

    def running(
        self, *, after: tuple[datetime, int] | None = None, limit: int = PAGE_SIZE
    ) -> Operation[JobPage]:
        """Running jobs, longest held first (the running index's order)."""
        params = {
            "after_at": after[0] if after else None,
            "after_id": after[1] if after else None,
            "limit": limit + 1,
        }

        return Operation(_page(self.running_page, params, limit))

    def detail(self, job_id: int) -> Operation[JobDetail]:
        """A job's row, its kept result, its history copies and its limit slot.

        The results and history tables are read only where the dashboard's
        role may (`JobDetail.results_readable`, `JobDetail.history_readable`)."""
        job_id = check_job_id(job_id)

        def plan() -> Plan[JobDetail]:
            rows = yield Query(self.detail_job, (job_id,))
            job = payload = None
            if rows:
                job, payload = _listed_row(rows[0])
            ((results_readable, history_readable),) = yield Query(self.readable, self.side_tables)
            result = None
            if results_readable:
                rows = yield Query(self.detail_result, (job_id,))
                if rows:
                    outcome, text, size, whole, *rest = rows[0]
                    value = None if text is None else Preview(text, size, whole)
                    result = ResultRow(outcome, value, *rest)
            history: list[HistoryRow] = []
            if history_readable and (self.queue.sql.history or job is None):
                rows = yield Query(self.detail_history, (job_id,))
                history = [HistoryRow(*r) for r in rows]
            rows = yield Query(self.detail_slot, (job_id,))
            slot = (rows[0][0], rows[0][1]) if rows else None
            dependents: tuple[int, ...] = ()
            ((readable,),) = yield Query(self.dependencies_readable, (self.dependencies_table,))
            if job is not None and readable:
                rows = yield Query(self.detail_dependents, (job_id,))
                dependents = tuple(r[0] for r in rows)
            ((now,),) = yield Query(b"SELECT now()")
            return JobDetail(
                job_id, job, payload, result, history, slot, now,
                bool(results_readable), bool(history_readable), dependents,
            )  # fmt: skip

        return Operation(plan())

    def payload_json(self, job_id: int) -> Operation[str | None]:
        """A job's whole payload as JSON text (None: no such job in the table)."""
        job_id = check_job_id(job_id)

        def plan() -> Plan[str | None]:
            rows = yield Query(self.payload_text, (job_id,))
            return rows[0][0] if rows else None

        return Operation(plan())

    # -- actions ----------------------------------------------------------

    def retry(self, job_ids: Iterable[int]) -> Operation[list[int]]:
        """Dead jobs back to pending, as `pgqueue.Queue.retry` does it; the ids revived."""
        ids = sorted(set(validate_ids(job_ids)))

        def plan() -> Plan[list[int]]:
            if not ids:
                return []
            rows = yield Query(
                self.queue.sql.operators.retry, {"ids": ids, "channel": self.queue.channel}
            )
            return sorted(r[0] for r in rows)

        return Operation(plan())

    def purge(self, job_ids: Iterable[int]) -> Operation[list[int]]:
        """Delete these jobs if they are dead; the ids deleted."""
        ids = sorted(set(validate_ids(job_ids)))

        def plan() -> Plan[list[int]]:
            if not ids:
                return []
            ((gone,),) = yield Query(self.purge_ids, (ids,))
            return list(gone)

        return Operation(plan())

    def matching_dead(self, where: JobFilter, *, after: int, limit: int = BATCH) -> bytes:
        """The next batch of dead jobs matching ``where`` (queue, kind ...), by id."""
        conditions, _ = self._conditions(_dead(where))
        return (
            sql.SQL("SELECT id FROM {table} WHERE {where} AND id > %(after)s ORDER BY id LIMIT {n}")
            .format(where=sql.SQL(" AND ").join(conditions), n=sql.Literal(limit), **self._names)
            .as_bytes(None)
        )

    def count_dead(self, where: JobFilter) -> Operation[Count]:
        """How many dead jobs match ``where``, up to `CAP`."""
        conditions, params = self._conditions(_dead(where))
        statement = (
            sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {where} LIMIT {n}) AS s")
            .format(where=sql.SQL(" AND ").join(conditions), n=sql.Literal(CAP + 1), **self._names)
            .as_bytes(None)
        )

        def plan() -> Plan[Count]:
            ((n,),) = yield Query(statement, params)
            return capped(n)

        return Operation(plan())

    def on_every_dead(self, where: JobFilter, action: str) -> Operation[list[int]]:
        """Retry or purge every dead job matching ``where``, `BATCH` jobs per
        statement (each short, none holding a snapshot over the whole set);
        the ids retried or purged."""
        if action not in ("retry", "purge"):
            raise ValueError(f"action must be 'retry' or 'purge', not {action!r}")
        _, params = self._conditions(_dead(where))
        statement = self.matching_dead(where, after=0)

        def plan() -> Plan[list[int]]:
            done: list[int] = []
            after = 0
            while True:
                rows = yield Query(statement, {**params, "after": after})
                ids = [r[0] for r in rows]
                if not ids:
                    return done
                after = ids[-1]
                if action == "retry":
                    done += yield from self.retry(ids).plan
                else:
                    done += yield from self.purge(ids).plan

        return Operation(plan())


def _dead(where: JobFilter) -> JobFilter:
    return JobFilter(JobStatus.DEAD, where.queue, where.kind, where.unique_key, where.payload)


def _listed(error_chars: int) -> sql.Composable:
    """`JOB_COLUMNS` of a listing's subquery ``s`` (see `_listing`): no payload
    (the listing reads the start of its text instead), the error cut short."""
    return sql.SQL(", ").join(
        sql.SQL("NULL::jsonb")
        if c == "payload"
        else sql.SQL("left(s.last_error, {})").format(sql.Literal(error_chars))
        if c == "last_error"
        else sql.Identifier("s", c)
        for c in JOB_COLUMNS
    )


def _listing(inner: sql.Composable, order: sql.Composable) -> bytes:
    """A page of jobs from ``inner`` (which reads ``{cols}``, ``payload_text``
    and ``payload_size`` up to its LIMIT): each job with the start of its
    payload and its size, and ``now()``. The LIMIT keeps the subquery apart,
    so each payload's text is made once, for the rows of the page only, and
    never leaves the server whole."""
    return (
        sql.SQL(
            "SELECT {listed}, left(s.payload_text, {preview}), s.payload_size,"
            " coalesce(length(s.payload_text) <= {preview}, false), now()"
            " FROM ({inner}) AS s ORDER BY {order}"
        )
        .format(
            listed=_listed(ERROR_CHARS),
            preview=sql.Literal(PREVIEW_CHARS),
            inner=inner,
            order=order,
        )
        .as_bytes(None)
    )


def _listed_row(row: tuple[Any, ...]) -> tuple[Job, Preview]:
    n = len(JOB_COLUMNS)
    return Job.from_row(row[:n]), Preview(row[n], row[n + 1], row[n + 2])


def _page(statement: bytes, params: dict[str, Any], limit: int) -> Plan[JobPage]:
    rows = yield Query(statement, params)
    now = rows[0][-1] if rows else None
    if now is None:
        ((now,),) = yield Query(b"SELECT now()")
    jobs, previews = [], {}
    for row in rows[:limit]:
        job, preview = _listed_row(row)
        jobs.append(job)
        previews[job.id] = preview
    more = len(rows) > limit
    return JobPage(jobs, jobs[-1].id if more else None, now, previews)


def check_job_id(value: object, what: str = "job id") -> int:
    """A job id: an int from 1 to `MAX_JOB_ID` (`BadFilter` otherwise)."""
    try:
        job_id = validate_job_id(value, what)
    except TypeError as exc:
        raise BadFilter(str(exc)) from None
    if not 1 <= job_id <= MAX_JOB_ID:
        raise BadFilter(f"{what} must be a job id (1 to {MAX_JOB_ID}), not {job_id}")
    return job_id


def parse_id(text: str, what: str = "id") -> int:
    """A job id from text: ASCII digits only (not ``²``), within a bigint; `BadFilter` if not."""
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_JOB_ID))):
        raise BadFilter(f"{what} must be a job id (1 to {MAX_JOB_ID}), not {text[:40]!r}")
    return check_job_id(int(text), what)


def parse_ids(values: Sequence[str]) -> list[int]:
    """Job ids from form values; `BadFilter` for anything but ids from 1 to `MAX_JOB_ID`."""
    return [parse_id(value) for value in values]
