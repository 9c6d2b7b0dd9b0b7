"""The statements that count: `stats()` and `queues()`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from ..jobs import DEFAULT_VISIBILITY_TIMEOUT, ROW_STATUSES, JobStatus, Stats, validate_timeout
from ..plans import Operation, Rows, fetch
from .table import FeatureStatements

__all__ = ["InspectStatements", "QueueState", "queue_states", "stats"]


@dataclass(frozen=True, slots=True)
class InspectStatements(FeatureStatements):
    stats: bytes
    queue_states: bytes


# Counts by queue, priority, kind and status, the longest wait of a ready
# job, and the running jobs whose lease is older than the visibility timeout
# given.
STATS: Final = """
SELECT queue, priority, kind, status, count(*),
       now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now()),
       count(*) FILTER (WHERE status = 'running' AND locked_at < now() - %s::interval)
  FROM {table}
 GROUP BY queue, priority, kind, status"""
# Every queue with jobs or a pause record: counts by status, paused or not.
QUEUE_STATES: Final = """
WITH counts AS (
    SELECT queue, status, count(*) AS n FROM {table} GROUP BY queue, status
)
SELECT coalesce(c.queue, q.queue), coalesce(q.paused, false), coalesce(c.status, 'pending'),
       coalesce(c.n, 0)
  FROM counts AS c FULL JOIN {queues} AS q ON q.queue = c.queue
 ORDER BY 1"""


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue as `queues()` reports it: paused or not, and its jobs by status."""

    name: str
    paused: bool
    counts: dict[JobStatus, int]


def stats(s: InspectStatements, visibility_timeout: timedelta | None) -> Operation[Stats]:
    timeout = validate_timeout(
        DEFAULT_VISIBILITY_TIMEOUT if visibility_timeout is None else visibility_timeout,
        "visibility_timeout",
    )
    return fetch(s.stats, (timeout,), _stats)


def _stats(rows: Rows) -> Stats:
    by_status = dict.fromkeys(ROW_STATUSES, 0)
    by_kind: dict[str, dict[JobStatus, int]] = {}
    by_queue: dict[str, dict[JobStatus, int]] = {}
    by_priority: dict[int, dict[JobStatus, int]] = {}
    ages = []
    expired = 0
    for queue, priority, kind, status, count, age, past_lease in rows:
        st = JobStatus(status)
        by_status[st] += count
        for table, key in ((by_kind, kind), (by_queue, queue), (by_priority, priority)):
            table.setdefault(key, dict.fromkeys(ROW_STATUSES, 0))[st] += count
        if age is not None:
            ages.append(age)
        expired += past_lease
    oldest = max(ages, default=None)
    return Stats(
        by_status,
        dict(sorted(by_kind.items())),
        oldest,
        expired,
        dict(sorted(by_queue.items())),
        dict(sorted(by_priority.items(), reverse=True)),
    )


def queue_states(s: InspectStatements) -> Operation[list[QueueState]]:
    """Every queue with jobs or a pause record, by name."""
    return fetch(s.queue_states, None, _queue_states)


def _queue_states(rows: Rows) -> list[QueueState]:
    found: dict[str, QueueState] = {}
    for name, paused, status, count in rows:
        state = found.setdefault(name, QueueState(name, paused, dict.fromkeys(ROW_STATUSES, 0)))
        state.counts[JobStatus(status)] += count
    return list(found.values())
