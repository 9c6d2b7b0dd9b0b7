"""What the dashboard's pages show: the overview's numbers, a page of jobs, a
job's detail, and the throughput sampled from the table's counters."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .jobs import Job, JobStatus
from .queue import counts
from .queue.counts import Count

__all__ = [
    "Group",
    "HistoryRow",
    "JobDetail",
    "JobPage",
    "Overview",
    "Preview",
    "QueueRow",
    "ResultRow",
    "Throughput",
    "overview_of",
]


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


def overview_of(
    tally: counts.Tally,
    paused: dict[str, bool],
    now: datetime,
    inserted: int | None,
    deleted: int | None,
    most: int,
) -> Overview:
    """The overview from the counts (`pgqueue.core.queue.counts.tally`): groups by
    queue and kind (past `EXACT_ROWS`, a queue's pending jobs in one group, their
    kinds not read), queues by name, the first `most` of each."""
    groups: dict[tuple[str, str | None], dict[JobStatus, Count]] = {}
    queues: dict[str, dict[JobStatus, Count]] = {}
    for g in tally.groups:
        kind = None if not tally.exact and g.status is JobStatus.PENDING else g.kind
        for found in (groups.setdefault((g.queue, kind), {}), queues.setdefault(g.queue, {})):
            found[g.status] = found.get(g.status, Count(0)) + g.count
    names = sorted(set(queues) | set(paused))
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
        for name in names[:most]
    ]
    return Overview(
        now=now,
        exact=tally.exact,
        totals=tally.totals,
        groups=[Group(queue, kind, found) for (queue, kind), found in shown[:most]],
        queues=queue_rows,
        more_groups=len(shown) > most or tally.more,
        more_queues=len(names) > most,
        oldest_ready=tally.oldest_ready,
        expired=tally.expired,
        table_rows=tally.table_rows,
        inserted=inserted,
        deleted=deleted,
    )
