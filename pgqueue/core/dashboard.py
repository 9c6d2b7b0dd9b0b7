"""What the web dashboard reads and decides, with no I/O (see `pgqueue.web`).

Every statement here is short whatever the table's size: it reads an index
in O(page) or O(cap), or the catalogs, never the whole job table (except
for exact counts of a table found to hold fewer than `EXACT_ROWS` rows).
Nor does what it reads grow with the data that anyone who may enqueue
controls: a list reads each payload's stored size and, for a payload
stored in at most `LISTED_BYTES`, the first `PREVIEW_CHARS` of its JSON
text (writing a large value as text is what costs); a job's page reads the
first `DETAIL_CHARS`; every list of groups and queues stops at `MAX_SHOWN`.
The counts are read as `stats()` reads them (`pgqueue.core.queue.counts`):
large ones are capped (`Count.capped`: shown as "10,000+") or estimated
from the planner's statistics (`Count.estimated`: "≈ 1.2M"). Pages go by
keyset (``id < before``), never by OFFSET. The dashboard runs them on
autocommit connections under a ``statement_timeout`` (`SESSION_SETTINGS`),
so that no snapshot it takes stays open.

Actions (retry, purge, cancel, pause ...) are the queue's own operations
(`pgqueue.core.ops.QueueCore`), plus `purge` of dead jobs by id and the
batched "every dead job matching this filter" plans defined here. What the
pages show is in `pgqueue.core.dashboard_pages`, the filters and ids a
request may give in `pgqueue.core.dashboard_filters`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from psycopg import sql

from .dashboard_filters import (
    BadFilter,
    JobFilter,
    check_job_id,
    parse_id,
    parse_ids,
)
from .dashboard_listing import (
    DETAIL_CHARS,
    LISTED_BYTES,
    listed,
    listed_row,
    listing,
    page,
)
from .dashboard_pages import (
    Group,
    HistoryRow,
    JobDetail,
    JobPage,
    Overview,
    Preview,
    QueueRow,
    ResultRow,
    Throughput,
    overview_of,
)
from .jobs import (
    DEFAULT_VISIBILITY_TIMEOUT,
    JobStatus,
    validate_ids,
)
from .ops import QueueCore
from .plans import Operation, Plan, Query
from .queue import counts
from .queue.counts import Count, capped
from .schema.columns import HISTORY_COLUMNS
from .schema.columns import job_columns as _read
from .schema.predicates import DEAD, RUNNING

__all__ = [
    "CAP",
    "EXACT_ROWS",
    "MAX_SHOWN",
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
    "capped",
    "check_job_id",
    "parse_id",
    "parse_ids",
]

# A count stops at this many rows ("10,000+"); a table with fewer rows than
# EXACT_ROWS is counted exactly (see `pgqueue.core.queue.counts`).
CAP: Final = counts.CAP
EXACT_ROWS: Final = counts.EXACT_ROWS
# Jobs per page of the browser, the dead jobs and the running jobs.
PAGE_SIZE: Final = 50
# Jobs an action on "every dead job matching the filter" handles per statement.
BATCH: Final = 500
# Rows of a group or queue list on a page, at most ("and more"); the queues
# with pending jobs are found by a walk of the claim index, one probe each.
MAX_SHOWN: Final = counts.MAX_SHOWN
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
            "shown": listed(DETAIL_CHARS),
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
        # The clock, and the table's cumulative counters of rows inserted and
        # deleted (what pg_stat_user_tables shows as n_tup_ins and n_tup_del),
        # for the throughput chart: catalog reads.
        self.counters = (
            b"SELECT now(), pg_stat_get_tuples_inserted(oid), pg_stat_get_tuples_deleted(oid)"
            b" FROM pg_class WHERE oid = %s::regclass"
        )
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
        self.running_page = listing(
            sql.SQL("""SELECT {cols}, {listed_text} AS payload_text,
       pg_column_size(payload) AS payload_size FROM {table}
 WHERE {running}
   AND (%(after_at)s::timestamptz IS NULL OR (locked_at, id) > (%(after_at)s, %(after_id)s))
 ORDER BY locked_at, id LIMIT %(limit)s""").format(**names),
            sql.SQL("s.locked_at, s.id"),
        )
        # Dead jobs by id go for good (copied to the history when it is on).
        self.purge_ids = render(_purge_ids(history))

    # -- reads ------------------------------------------------------------

    def overview(
        self, visibility_timeout: timedelta = DEFAULT_VISIBILITY_TIMEOUT
    ) -> Operation[Overview]:
        """The overview's numbers: exact on a small table, capped or estimated on a large one."""

        def plan() -> Plan[Overview]:
            ((now, inserted, deleted),) = yield Query(self.counters, (self.regclass,))
            tally = yield from counts.tally(
                self.queue.sql.inspect,
                visibility_timeout,
                cap=CAP,
                exact_rows=EXACT_ROWS,
                pairs=MAX_SHOWN + 1,
            )
            pauses = yield Query(self.queue.sql.inspect.pause_records, (MAX_SHOWN + 1,))
            return overview_of(tally, dict(pauses), now, inserted, deleted, MAX_SHOWN)

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
        statement = listing(
            sql.SQL(
                "SELECT {cols}, {listed_text} AS payload_text,"
                " pg_column_size(payload) AS payload_size FROM {table} WHERE {where}"
                " ORDER BY id DESC LIMIT %(limit)s"
            ).format(where=sql.SQL(" AND ").join(conditions), **self._names),
            sql.SQL("s.id DESC"),
        )
        return Operation(page(statement, params, limit))

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

        return Operation(page(self.running_page, params, limit))

    def detail(self, job_id: int) -> Operation[JobDetail]:
        """A job's row, its kept result, its history copies and its limit slot.

        The results and history tables are read only where the dashboard's
        role may (`JobDetail.results_readable`, `JobDetail.history_readable`)."""
        job_id = check_job_id(job_id)

        def plan() -> Plan[JobDetail]:
            rows = yield Query(self.detail_job, (job_id,))
            job = payload = None
            if rows:
                job, payload = listed_row(rows[0])
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
        return _on_ids(job_ids, self._retry)

    def purge(self, job_ids: Iterable[int]) -> Operation[list[int]]:
        """Delete these jobs if they are dead; the ids deleted."""
        return _on_ids(job_ids, self._purge)

    def _retry(self, ids: list[int]) -> Plan[list[int]]:
        rows = yield Query(
            self.queue.sql.operators.retry, {"ids": ids, "channel": self.queue.channel}
        )
        return sorted(r[0] for r in rows)

    def _purge(self, ids: list[int]) -> Plan[list[int]]:
        ((gone,),) = yield Query(self.purge_ids, (ids,))
        return list(gone)

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
                done += yield from (self._retry if action == "retry" else self._purge)(ids)

        return Operation(plan())


def _on_ids(
    job_ids: Iterable[int], act: Callable[[list[int]], Plan[list[int]]]
) -> Operation[list[int]]:
    """An action on jobs by id: ``act`` on the distinct ids, in order, which
    gives the ids it acted on; no id, no statement."""
    ids = sorted(set(validate_ids(job_ids)))

    def plan() -> Plan[list[int]]:
        if not ids:
            return []
        return (yield from act(ids))

    return Operation(plan())


def _purge_ids(history: bool) -> str:
    """The template of a purge of dead jobs by id, which copies them to the
    history when the queue keeps one."""
    gone = HISTORY_COLUMNS if history else ("id",)
    keep = ""
    if history:
        cols = ", ".join(gone)
        keep = (
            f", kept AS (INSERT INTO {{history}} ({cols}, outcome)"
            f" SELECT {cols}, 'dead' FROM purged)"
        )
    return f"""
WITH purged AS (
    DELETE FROM {{table}} WHERE id = ANY(%s::bigint[]) AND status = 'dead'
    RETURNING {", ".join(gone)}){keep}
SELECT coalesce(array_agg(id ORDER BY id), '{{{{}}}}') FROM purged"""


def _dead(where: JobFilter) -> JobFilter:
    return JobFilter(JobStatus.DEAD, where.queue, where.kind, where.unique_key, where.payload)
