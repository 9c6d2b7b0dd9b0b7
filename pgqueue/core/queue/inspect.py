"""The statements that count: `stats()` and `queues()`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .table import Table

__all__ = ["InspectStatements"]

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
class InspectStatements:
    stats: bytes
    queue_states: bytes

    @classmethod
    def of(cls, t: Table) -> InspectStatements:
        return cls(stats=t.render(STATS), queue_states=t.render(QUEUE_STATES))
