"""The statements of job control: pause a queue, and where a job stands
(its row, else its kept result). The cancel, which ends jobs, is built with
the other statements that do (`pgqueue.core.sql` for now)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..jobs import Job, validate_ids, validate_queue
from ..plans import Operation, Rows, execute, fetch
from ..results import JobResult
from .table import FeatureStatements

__all__ = ["ControlStatements", "result", "set_paused"]


@dataclass(frozen=True, slots=True)
class ControlStatements(FeatureStatements):
    set_paused: bytes
    result: bytes
    probe_uncommitted: bytes
    set_local: bytes


# Pause or resume a queue: claims leave a paused queue's jobs alone.
# Resuming wakes the workers.
SET_PAUSED: Final = """
INSERT INTO {queues} AS q (queue, paused) VALUES (%(queue)s, %(paused)s)
ON CONFLICT (queue) DO UPDATE SET paused = EXCLUDED.paused, changed_at = now()
RETURNING queue, CASE WHEN NOT paused THEN pg_notify(%(channel)s, '') END"""

# -- results (docs/results.md) ------------------------------------------------
#
# Where a job stands: its row if it has one (pending, running, dead), else
# its kept result (succeeded, dead, cancelled) until it expires.
RESULT: Final = """
SELECT status, NULL::jsonb, last_error, NULL::timestamptz FROM {table} WHERE id = %(id)s
UNION ALL
SELECT outcome, value, error, finished_at FROM {results}
 WHERE job_id = %(id)s AND expires_at > now()
   AND NOT EXISTS (SELECT FROM {table} WHERE id = %(id)s)"""
# Neither: was the job enqueued by a transaction still open? An insert of its
# id waits for that transaction (lock_timeout: LockNotAvailable); finds the
# row committed meanwhile (nothing returned); or finds no such job, and fails
# on purpose (division_by_zero) so that nothing is written. Run in a
# transaction with a short lock_timeout.
PROBE_UNCOMMITTED: Final = """
INSERT INTO {table} (id, kind) VALUES (%(id)s, 'pgqueue.probe')
ON CONFLICT (id) DO NOTHING
RETURNING id / 0"""
# A setting for the rest of the caller's transaction (the probe's lock_timeout).
SET_LOCAL: Final = b"SELECT set_config(%s, %s, true)"


def set_paused(s: ControlStatements, channel: str, queue: str, paused: bool) -> Operation[None]:
    """Pause a queue (claims leave its jobs alone) or resume it (and wake workers)."""
    params = {"queue": validate_queue(queue), "paused": paused, "channel": channel}
    return execute(s.set_paused, params)


def result(s: ControlStatements, job_id: Job | int) -> Operation[JobResult | None]:
    """Where a job stands: its row, else its kept result; None if neither."""
    (checked,) = validate_ids([job_id])

    def read(rows: Rows) -> JobResult | None:
        return JobResult.from_row(checked, rows[0]) if rows else None

    return fetch(s.result, {"id": checked}, read)
