"""The statements that keep a table healthy: the reaper, a worker's
heartbeat and its look for cancels, and the prunes of what expired."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from ..backoff import Backoff
from ..jobs import LEASE_EXPIRED, Job, JobStatus, validate_timeout
from ..plans import Operation, Plan, Query, fetch, first_count
from ..states import Event
from .outcomes import OutcomeStatements, decide, recorded_failures
from .table import FeatureStatements

__all__ = [
    "Heartbeat",
    "MaintenanceStatements",
    "cancel_requests",
    "heartbeat",
    "prune_history",
]

# The reaper, step 0: one reaper at a time per table; the others skip.
REAP_LOCK: Final = b"SELECT pg_try_advisory_xact_lock(hashtext('pgqueue:reap:' || %s))"
# The reaper, step 1: running jobs whose lease ran out, locked so that two
# reapers never judge the same job. It reads the running index (migration 6):
# the running jobs only, however many dead and pending ones the table holds,
# so a short statement_timeout spares it.
EXPIRED: Final = """
SELECT id, attempts, max_attempts, locked_by FROM {table}
 WHERE status = 'running' AND locked_at < now() - %s::interval
 ORDER BY id
 FOR UPDATE SKIP LOCKED"""
# Leases past their window, removed by the reaper.
PRUNE_LEASES: Final = "DELETE FROM {leases} WHERE expires_at <= now() - interval '1 minute'"
# Results past their time, removed by the reaper a batch at a time.
PRUNE_RESULTS: Final = """
DELETE FROM {results}
 WHERE job_id = ANY(ARRAY(SELECT job_id FROM {results} WHERE expires_at <= now() LIMIT 10000))"""
# Retention for the history table.
PRUNE_HISTORY: Final = """
WITH gone AS (DELETE FROM {history} WHERE finished_at < now() - %s::interval RETURNING 1)
SELECT count(*) FROM gone"""

# A worker keeps the lease of the jobs it is still running, and learns which
# of them were cancelled (should it have missed the notification): no query
# of its own for that.
HEARTBEAT: Final = """
UPDATE {table} SET locked_at = now()
 WHERE id = ANY(%s::bigint[]) AND status = 'running' AND locked_by = %s
RETURNING id, cancel_requested_at IS NOT NULL"""
# A worker that cannot listen looks for cancels between heartbeats: a read,
# which neither rewrites nor locks the rows.
CANCEL_REQUESTS: Final = (
    "SELECT id FROM {table} WHERE id = ANY(%s::bigint[]) AND cancel_requested_at IS NOT NULL"
)


@dataclass(frozen=True, slots=True)
class MaintenanceStatements(FeatureStatements):
    reap_lock: bytes
    expired: bytes
    prune_leases: bytes
    prune_results: bytes
    prune_history: bytes
    heartbeat: bytes
    cancel_requests: bytes


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """What a heartbeat found: the jobs still held (leases renewed), and
    those of them whose cancellation was requested."""

    held: list[int]
    cancel: list[int]


def heartbeat(s: MaintenanceStatements, ids: Sequence[int], worker: str) -> Operation[Heartbeat]:
    def plan() -> Plan[Heartbeat]:
        if not ids:
            return Heartbeat([], [])
        rows = yield Query(s.heartbeat, (list(ids), worker))
        return Heartbeat([r[0] for r in rows], [r[0] for r in rows if r[1]])

    return Operation(plan())


def cancel_requests(s: MaintenanceStatements, ids: Sequence[int]) -> Operation[list[int]]:
    """Which of these jobs had their cancel requested (a worker's look)."""

    def plan() -> Plan[list[int]]:
        if not ids:
            return []
        rows = yield Query(s.cancel_requests, (list(ids),))
        return [r[0] for r in rows]

    return Operation(plan())


def prune_history(s: MaintenanceStatements, older_than: timedelta) -> Operation[int]:
    age = validate_timeout(older_than, "older_than")
    return fetch(s.prune_history, (age,), first_count)


def reap_outcomes(
    s: MaintenanceStatements, outcomes: OutcomeStatements, table: str, visibility_timeout: timedelta
) -> Operation[dict[int, JobStatus]]:
    """The reaper: prune what expired, and record the running jobs whose
    lease ran out as failures (pending again, or dead on their last
    attempt); what each became. One reaper at a time per table."""
    timeout = validate_timeout(visibility_timeout, "visibility_timeout")

    def plan() -> Plan[dict[int, JobStatus]]:
        [(ours,)] = yield Query(s.reap_lock, (table,))
        if not ours:
            return {}  # another worker is reaping this table right now
        yield Query(s.prune_leases)
        yield Query(s.prune_results)
        rows = yield Query(s.expired, (timeout,))
        failures = [
            decide(
                _running_stub(job_id, attempts, max_attempts, locked_by),
                f"{LEASE_EXPIRED}: no word from worker {locked_by!r} for {timeout}",
                retry_in=None,
                event=Event.EXPIRE,
                backoff=_NO_BACKOFF,  # an expired lease is retried at once
            )
            for job_id, attempts, max_attempts, locked_by in rows
        ]
        if not failures:
            return {}
        return (yield from recorded_failures(outcomes, failures))

    return Operation(plan(), atomic=True)


_NO_BACKOFF: Final = Backoff()


def _running_stub(job_id: int, attempts: int, max_attempts: int, locked_by: str | None) -> Job:
    """Just enough of a running job for the state machine to judge it."""
    epoch = datetime.min
    return Job(
        id=job_id,
        kind="",
        payload=None,
        attempts=attempts,
        max_attempts=max_attempts,
        status=JobStatus.RUNNING,
        run_at=epoch,
        last_error=None,
        locked_by=locked_by,
        locked_at=None,
        created_at=epoch,
    )
