"""Jobs as values, and the validation of a job (the generic validators are in
`pgqueue.core.validation`, and named here too).

Nothing here touches a database: a bad argument is refused before any
connection is taken, so nothing is ever half-written.
"""

from __future__ import annotations

import enum
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# The generic validators (`pgqueue.core.validation`), named here too.
from .validation import (
    MAX_BURST as MAX_BURST,
    MAX_DELAY as MAX_DELAY,
    MAX_IDENTIFIER_LENGTH as MAX_IDENTIFIER_LENGTH,
    MAX_KIND_LENGTH as MAX_KIND_LENGTH,
    MAX_NAME_LENGTH as MAX_NAME_LENGTH,
    MAX_PAYLOAD_BYTES as MAX_PAYLOAD_BYTES,
    MAX_PRIORITY as MAX_PRIORITY,
    MAX_RATE as MAX_RATE,
    MAX_TABLE_NAME_LENGTH as MAX_TABLE_NAME_LENGTH,
    MIN_PRIORITY as MIN_PRIORITY,
    encode_payload as encode_payload,
    error_text as error_text,
    refuse_control as refuse_control,
    validate_age as validate_age,
    validate_claim_bytes as validate_claim_bytes,
    validate_delay as validate_delay,
    validate_job_id as validate_job_id,
    validate_kind as validate_kind,
    validate_kinds as validate_kinds,
    validate_limit as validate_limit,
    validate_limit_key as validate_limit_key,
    validate_name as validate_name,
    validate_priority as validate_priority,
    validate_queue as validate_queue,
    validate_queues as validate_queues,
    validate_rate as validate_rate,
    validate_table_name as validate_table_name,
    validate_timeout as validate_timeout,
    wrong_connection as wrong_connection,
)

__all__ = [
    "DuplicateJob",
    "Job",
    "JobNotRunning",
    "JobSpec",
    "JobStatus",
    "Stats",
    "ValidatedSpec",
    "validate_kind",
    "validate_kinds",
    "validate_priority",
    "validate_queue",
    "validate_queues",
    "validate_table_name",
]

DEFAULT_QUEUE = "default"
# The scopes of `unique=`, and what `on_duplicate=` may say.
UNIQUE_SCOPES = ("queued", "active")
ON_DUPLICATE = ("return", "raise", "replace")
# How the reaper's last_error begins: the job's worker vanished while holding
# it (a crash, a kill, a lost host), maybe because of the job itself.
LEASE_EXPIRED = "lease expired"


class JobStatus(enum.StrEnum):
    """The status a job row has in the table. A succeeded job has no row at all."""

    PENDING = "pending"
    RUNNING = "running"
    DEAD = "dead"
    # Enqueued with `depends_on`: not claimable until every job it depends
    # on has succeeded (docs/workflows.md).
    WAITING = "waiting"
    # Never in the table: what recording an outcome reports for a job whose
    # cancellation was requested (`cancel`); its row is gone.
    CANCELLED = "cancelled"


# The statuses a job row can have (`JobStatus.CANCELLED` is never one).
ROW_STATUSES: tuple[JobStatus, ...] = (
    JobStatus.PENDING,
    JobStatus.RUNNING,
    JobStatus.DEAD,
    JobStatus.WAITING,
)

# JobStatus by value, without an Enum call per row read.
_STATUSES: dict[str, JobStatus] = {s.value: s for s in JobStatus}


@dataclass(frozen=True, slots=True)
class Job:
    """One job as read from the table; what a handler receives."""

    id: int
    kind: str
    payload: Any
    attempts: int
    max_attempts: int
    status: JobStatus
    run_at: datetime
    last_error: str | None
    locked_by: str | None
    locked_at: datetime | None
    created_at: datetime
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    unique_key: str | None = None
    result_ttl: timedelta | None = None
    """How long its outcome and return value are kept (`enqueue(result_ttl=)`), or None."""
    limit_key: str | None = None
    """The concurrency limit it counts against (`set_limit`), or None."""
    cancel_requested: bool = False
    """Whether `cancel` asked for this job to stop (as read when it was fetched)."""
    trace_context: str | None = None
    """The W3C ``traceparent`` of the span that enqueued it, or None (see docs/tracing.md)."""
    parents: dict[int, Any] | None = None
    """For a job enqueued with ``depends_on``: each direct dependency's id, with
    its stored result value once it succeeded (jobs enqueued with
    ``result_ttl``), else None. None for a job without dependencies."""

    @property
    def orphaned(self) -> bool:
        """Whether its last attempt ended with its worker gone (the reaper put it back).

        Such a job may be what took that worker down, and the jobs claimed
        beside it went down with it; so a worker runs an orphaned job alone,
        with nothing else claimed (see `pgqueue.AsyncWorker`).
        """
        return self.last_error is not None and self.last_error.startswith(LEASE_EXPIRED)

    @classmethod
    def from_json(cls, v: list[Any]) -> Job:
        """Build a job from `JOB_COLUMNS` as one JSON array (`job_json`): its
        timestamps ISO text (parsed in place). An array, not an object: a worker reads a batch
        of them per turn, and an array of values parses in a third of the
        time of objects that repeat every column's name."""
        v[6], v[10] = _iso(v[6]), _iso(v[10])
        if v[9] is not None:
            v[9] = _iso(v[9])
        return cls.from_row(v)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Job:
        """Build a job from a row in the order of `pgqueue.core.sql.JOB_COLUMNS`
        (the fields' own order)."""
        (id_, kind, payload, attempts, max_attempts, status, run_at, last_error, locked_by,
         locked_at, created_at, queue, priority, unique_key, result_ttl, limit_key,
         cancel_requested, trace_context, parents) = row  # fmt: skip
        return cls(
            id_, kind, payload, attempts, max_attempts, _STATUSES[status], run_at, last_error,
            locked_by, locked_at, created_at, queue, priority, unique_key, _seconds(result_ttl),
            limit_key, cancel_requested, trace_context, _parents(parents),
        )  # fmt: skip


_iso = datetime.fromisoformat


def _parents(value: dict[str, Any] | None) -> dict[int, Any] | None:
    """The ``parents`` column (JSON object keyed by id as text), keyed by int."""
    return None if value is None else {int(k): v for k, v in value.items()}


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job to enqueue, for `enqueue_many`.

    >>> JobSpec("send_receipt", {"order_id": 7}, delay=timedelta(minutes=5))
    JobSpec(kind='send_receipt', payload={'order_id': 7}, run_at=None, delay=datetime.timedelta(seconds=300), max_attempts=3, queue='default', priority=0, unique_key=None, unique='queued', unique_for=None, on_duplicate='return', result_ttl=None, limit_key=None, depends_on=None)
    """  # noqa: E501

    kind: str
    payload: Any = None
    run_at: datetime | None = None
    delay: timedelta | None = None
    max_attempts: int = 3
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    unique_key: str | None = None
    unique: str = "queued"
    unique_for: timedelta | None = None
    on_duplicate: str = "return"
    result_ttl: timedelta | None = None
    limit_key: str | None = None
    depends_on: Sequence[int] | None = None


@dataclass(frozen=True, slots=True)
class Unique:
    """A validated uniqueness rule: at most one job with `key` in `scope`
    (``queued``, ``active``), or, with `window`, one per key per window."""

    key: str
    scope: str
    window: timedelta | None
    on_duplicate: str

    @property
    def stored_scope(self) -> str:
        """What the row's ``unique_scope`` column says: which unique index holds it."""
        return "window" if self.window is not None else self.scope


@dataclass(frozen=True, slots=True)
class ValidatedSpec:
    """A job that passed validation, with its payload already encoded as JSON text."""

    kind: str
    payload_json: str
    run_at: datetime | None
    delay: timedelta
    max_attempts: int
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    unique: Unique | None = None
    result_ttl: timedelta | None = None
    limit_key: str | None = None
    # The jobs it waits for (`depends_on`), without repeats, in the order given.
    depends_on: tuple[int, ...] = ()

    def row_params(self, trace_context: str | None, channel: str) -> dict[str, Any]:
        """The parameters of a statement that writes its row (and notifies ``channel``)."""
        return {
            "kind": self.kind,
            "payload": self.payload_json,
            "run_at": self.run_at,
            "delay": self.delay,
            "max_attempts": self.max_attempts,
            "queue": self.queue,
            "priority": self.priority,
            "result_ttl": self.result_ttl,
            "limit_key": self.limit_key,
            "trace_context": trace_context,
            "channel": channel,
        }


@dataclass(frozen=True, slots=True)
class Stats:
    """What `stats()` reports: counts by status and by kind, and the oldest wait."""

    by_status: dict[JobStatus, int]
    by_kind: dict[str, dict[JobStatus, int]] = field(default_factory=dict)
    oldest_pending_age: timedelta | None = None
    """How long the oldest job that is ready to run has been waiting, or None."""
    expired: int = 0
    """Running jobs whose lease is older than the visibility timeout `stats()` was
    given: the reaper will return them to pending (their worker is presumably gone)."""
    by_queue: dict[str, dict[JobStatus, int]] = field(default_factory=dict)
    by_priority: dict[int, dict[JobStatus, int]] = field(default_factory=dict)
    """Counts by priority, highest first."""
    estimated: frozenset[str] = frozenset()
    """The counts that are not exact, by name: a status (``"pending"``) or
    ``"expired"``. Empty on a table of fewer than 50,000 rows, where every
    count is exact. On a larger one each status is counted through its index
    up to a cap (10,000): a status past it has an estimate in `by_status`
    (from the planner's statistics), and lower bounds in `by_kind`,
    `by_queue` and `by_priority` (the pending jobs without a limit key are
    counted by queue and priority, not by kind); `expired` then means "at
    least". See docs/operations.md, "Counting"."""

    @property
    def exact(self) -> bool:
        """Every count is exact (`estimated` is empty)."""
        return not self.estimated

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


class DuplicateJob(Exception):
    """Raised by ``enqueue(..., unique_key=..., on_duplicate="raise")`` when the
    key is taken; `existing_id` is the job that holds it."""

    def __init__(self, unique_key: str, existing_id: int) -> None:
        super().__init__(f"a job with unique key {unique_key!r} exists already: job {existing_id}")
        self.unique_key = unique_key
        self.existing_id = existing_id


class JobNotRunning(Exception):
    """The job is no longer running under the claim given: its outcome was not recorded.

    This happens when a lease expired and the job was reaped (and maybe
    claimed again) before the outcome arrived.
    """


def default_worker_name() -> str:
    """``host:pid``, the name a claim records in ``locked_by`` unless told otherwise."""
    return f"{socket.gethostname()}:{os.getpid()}"


def validate_ids(ids: Iterable[object]) -> list[int]:
    """Accept jobs or integer ids; return the ids."""
    out: list[int] = []
    for item in ids:
        if isinstance(item, Job):
            out.append(item.id)
        elif isinstance(item, int) and not isinstance(item, bool):
            out.append(item)
        else:
            raise TypeError(f"expected a Job or an int id, got {type(item).__name__}")
    return out


# What `stats()` measures leases against unless told otherwise: the workers' default.
DEFAULT_VISIBILITY_TIMEOUT = timedelta(minutes=5)


def validate_status(status: object) -> JobStatus:
    """A `JobStatus`, or its name as text; anything else is refused."""
    if isinstance(status, JobStatus) and status in ROW_STATUSES:
        return status
    if not isinstance(status, str):
        raise TypeError(f"status must be a JobStatus or a str, not {type(status).__name__}")
    try:
        found = JobStatus(status)
        if found not in ROW_STATUSES:
            raise ValueError(found)
        return found
    except ValueError:
        known = ", ".join(s.value for s in ROW_STATUSES)
        raise ValueError(f"unknown job status {status!r}: expected one of {known}") from None
