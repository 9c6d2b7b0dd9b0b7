"""Jobs as values, and the validation of everything a user hands to the queue.

Nothing here touches a database: a bad argument is refused before any
connection is taken, so nothing is ever half-written.
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

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
    "validate_spec",
    "validate_table_name",
]

MAX_KIND_LENGTH = 255
# PostgreSQL truncates identifiers (names of tables, indexes, channels) at 63 bytes.
MAX_IDENTIFIER_LENGTH = 63
# Index names are "<table>_ready" and so on.
MAX_TABLE_NAME_LENGTH = 48
_NO_DELAY = timedelta(0)
# A job's priority: larger runs first.
MIN_PRIORITY, MAX_PRIORITY = -100, 100
DEFAULT_QUEUE = "default"
# Names of queues, unique keys and schedules.
MAX_NAME_LENGTH = 255
# The scopes of `unique=`, and what `on_duplicate=` may say.
UNIQUE_SCOPES = ("queued", "active")
ON_DUPLICATE = ("return", "raise", "replace")
# The largest payload accepted, measured as the JSON text pgqueue sends
# (all ASCII, so a character is a byte). jsonb refuses a string, array or
# object whose stored form passes 2**28 - 1 bytes (just under 256 MiB), but
# only after the whole text has crossed the wire (about 10 s for 256 MiB on
# a local socket); a message over 1 GB drops the connection. A MiB under
# jsonb's bound leaves room for the bytes jsonb adds around each value. The
# bound is on the text, not the stored form, which can be larger (a number
# is 1 or 2 characters of JSON, 8 or more bytes of jsonb): PostgreSQL may
# still refuse a payload under it, and then too nothing is written. Read at
# each call, so that a test can lower it.
MAX_PAYLOAD_BYTES = 255 * 2**20
# The longest delay a job may be given: a bound well inside what Python's
# datetime (year 9999) reads back, far beyond any real schedule.
MAX_DELAY = timedelta(days=365 * 1000)
# How the reaper's last_error begins: the job's worker vanished while holding
# it (a crash, a kill, a lost host), maybe because of the job itself.
LEASE_EXPIRED = "lease expired"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


# One encoder for every payload: building one per call costs more than encoding.
_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
# The same, without escaping non-ASCII: only to find lone surrogates, which jsonb refuses.
_JSON_UNESCAPED = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)


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

    def __str__(self) -> str:
        return self.value


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
    def from_json(cls, row: dict[str, Any]) -> Job:
        """Build a job from a row as PostgreSQL's ``json_agg`` renders it."""
        locked_at = row["locked_at"]
        return cls(
            id=row["id"],
            kind=row["kind"],
            payload=row["payload"],
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            status=_STATUSES[row["status"]],
            run_at=datetime.fromisoformat(row["run_at"]),
            last_error=row["last_error"],
            locked_by=row["locked_by"],
            locked_at=None if locked_at is None else datetime.fromisoformat(locked_at),
            created_at=datetime.fromisoformat(row["created_at"]),
            queue=row["queue"],
            priority=row["priority"],
            unique_key=row["unique_key"],
            result_ttl=_seconds(row["result_ttl"]),
            limit_key=row["limit_key"],
            cancel_requested=row["cancel_requested"],
            trace_context=row["trace_context"],
            parents=_parents(row.get("parents")),
        )

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Job:
        """Build a job from a row in the order of `pgqueue.core.sql.JOB_COLUMNS`."""
        (id_, kind, payload, attempts, max_attempts, status, run_at, last_error, locked_by,
         locked_at, created_at, queue, priority, unique_key, result_ttl, limit_key,
         cancel_requested, trace_context, parents) = row  # fmt: skip
        return cls(
            id=id_,
            kind=kind,
            payload=payload,
            attempts=attempts,
            max_attempts=max_attempts,
            status=_STATUSES[status],
            run_at=run_at,
            last_error=last_error,
            locked_by=locked_by,
            locked_at=locked_at,
            created_at=created_at,
            queue=queue,
            priority=priority,
            unique_key=unique_key,
            result_ttl=_seconds(result_ttl),
            limit_key=limit_key,
            cancel_requested=cancel_requested,
            trace_context=trace_context,
            parents=_parents(parents),
        )


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


SpecLike = JobSpec | tuple[str, Any]


def validate_kind(kind: object) -> str:
    if not isinstance(kind, str):
        raise TypeError(f"job kind must be a str, not {type(kind).__name__}")
    if not kind.strip():
        raise ValueError("job kind must not be empty")
    if "\x00" in kind:
        raise ValueError("job kind must not contain NUL characters")
    if not kind.isascii():
        try:
            kind.encode()
        except UnicodeEncodeError:
            raise ValueError(
                "job kind must be valid Unicode text (it has a lone surrogate)"
            ) from None
    if len(kind) > MAX_KIND_LENGTH:
        raise ValueError(f"job kind is longer than {MAX_KIND_LENGTH} characters")
    return kind


def validate_kinds(kinds: Iterable[str] | None) -> list[str] | None:
    """Validate a worker's or claim's `kinds=` filter; None means every kind."""
    if kinds is None:
        return None
    if isinstance(kinds, str):
        raise TypeError("kinds must be a collection of str, not a single str")
    checked = [validate_kind(k) for k in kinds]
    if not checked:
        raise ValueError("kinds must name at least one kind (or be None for all kinds)")
    return checked


def encode_payload(payload: Any) -> str:
    """Encode a payload as JSON text, refusing what PostgreSQL's jsonb would refuse."""
    try:
        text = _JSON.encode(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"job payload is not JSON-serialisable: {exc}") from exc
    if len(text) > MAX_PAYLOAD_BYTES:
        raise ValueError(
            f"job payload is too large: {len(text):,} bytes as JSON, at most "
            f"{MAX_PAYLOAD_BYTES:,} (jsonb's limit); store big data elsewhere "
            "and pass a reference to it"
        )
    # A NUL is the escape \u0000 after an even run of backslashes; after an
    # odd one the backslash is escaped and "u0000" is just text.
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise ValueError("job payload must not contain NUL characters (jsonb cannot store them)")
    if "\\ud" in text:  # a character beyond U+FFFF, or a lone surrogate
        try:
            _JSON_UNESCAPED.encode(payload).encode()
        except UnicodeEncodeError:
            raise ValueError(
                "job payload must be valid Unicode text (it has a lone surrogate, "
                "which jsonb cannot store)"
            ) from None
    return text


def validate_spec(
    kind: object,
    payload: Any = None,
    *,
    run_at: datetime | None = None,
    delay: timedelta | None = None,
    max_attempts: int = 3,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    unique_key: str | None = None,
    unique: str = "queued",
    unique_for: timedelta | None = None,
    on_duplicate: str = "return",
    result_ttl: timedelta | None = None,
    limit_key: str | None = None,
    depends_on: object = None,
) -> ValidatedSpec:
    """Check one job's arguments; raise TypeError or ValueError on the first bad one."""
    kind = validate_kind(kind)
    queue = validate_queue(queue)
    priority = validate_priority(priority)
    rule = validate_unique(unique_key, unique, unique_for, on_duplicate)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise TypeError(f"max_attempts must be an int, not {type(max_attempts).__name__}")
    if not 1 <= max_attempts <= 2**31 - 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    if run_at is not None and delay is not None:
        raise ValueError("give run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise TypeError(f"run_at must be a datetime, not {type(run_at).__name__}")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise ValueError("run_at must be timezone-aware (a naive datetime is ambiguous)")
    delay = _NO_DELAY if delay is None else validate_delay(delay, "delay")
    if result_ttl is not None:
        result_ttl = validate_timeout(result_ttl, "result_ttl")
        if result_ttl > MAX_DELAY:
            raise ValueError(f"result_ttl must be at most {MAX_DELAY.days} days, got {result_ttl}")
    if limit_key is not None:
        limit_key = validate_limit_key(limit_key)
    parents = validate_depends_on(depends_on)
    if parents and rule is not None:
        raise ValueError("a job with depends_on cannot have a unique_key (not supported yet)")
    payload_json = encode_payload(payload)
    return ValidatedSpec(kind, payload_json, run_at, delay, max_attempts, queue, priority, rule,
                         result_ttl, limit_key, parents)  # fmt: skip


# The most jobs one job may depend on directly (a group's `then` depends on
# every job of the group).
MAX_DEPENDENCIES: Final = 100_000


def validate_depends_on(depends_on: object) -> tuple[int, ...]:
    """``depends_on=``: a list (or tuple) of job ids, or None; repeats count once.

    >>> validate_depends_on([3, 1, 3])
    (3, 1)
    """
    if depends_on is None:
        return ()
    if not isinstance(depends_on, (list, tuple)):
        raise TypeError(f"depends_on must be a list of job ids, not {type(depends_on).__name__}")
    ids: dict[int, None] = {}
    for item in depends_on:
        if isinstance(item, Job):
            item = item.id
        if isinstance(item, bool) or not isinstance(item, int):
            raise TypeError(f"depends_on must hold job ids (int), not {type(item).__name__}")
        if not 1 <= item <= 2**63 - 1:
            raise ValueError(f"depends_on holds {item}, which is no job id")
        ids[item] = None
    if len(ids) > MAX_DEPENDENCIES:
        raise ValueError(f"a job may depend on at most {MAX_DEPENDENCIES:,} jobs")
    return tuple(ids)


def validate_limit_key(key: object) -> str:
    """The key of a concurrency limit (`limit_key=`, `set_limit`)."""
    return _validate_name(key, "limit_key")


MAX_RATE: Final = 1_000_000.0  # jobs a second, for one key
MAX_BURST: Final = 1_000_000


def validate_rate(per_second: object, burst: object) -> tuple[float | None, int | None]:
    """A rate limit (`set_rate`): jobs a second, and how many may start at
    once after a pause (default: one second's worth, at least 1); None and
    None to remove it."""
    if per_second is None:
        if burst is not None:
            raise ValueError("a burst needs a rate: give per_second too")
        return None, None
    if isinstance(per_second, bool) or not isinstance(per_second, (int, float)):
        raise TypeError(f"per_second must be a number, not {type(per_second).__name__}")
    if not 0 < per_second <= MAX_RATE:  # NaN fails this too
        raise ValueError(
            f"per_second must be above 0 and at most {MAX_RATE:,.0f}, got {per_second}"
        )
    if burst is None:
        burst = max(1, math.ceil(per_second))
    if isinstance(burst, bool) or not isinstance(burst, int):
        raise TypeError(f"burst must be an int, not {type(burst).__name__}")
    if not 1 <= burst <= MAX_BURST:
        raise ValueError(f"burst must be from 1 to {MAX_BURST:,}, got {burst}")
    return float(per_second), burst


def _validate_name(value: object, what: str) -> str:
    """A queue name or a unique key: non-empty text that a text column stores."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} is longer than {MAX_NAME_LENGTH} characters")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be valid Unicode text (it has a lone surrogate)") from None
    return value


def validate_queue(queue: object) -> str:
    """A queue's name: also no control character (names reach log lines and pages)."""
    return refuse_control(_validate_name(queue, "queue name"), "queue name")


def refuse_control(value: str, what: str) -> str:
    """``value``, if it holds no control character (a newline could forge a log line)."""
    if any(c < " " or "\x7f" <= c <= "\x9f" for c in value):
        raise ValueError(f"{what} must not contain control characters (newline, tab ...)")
    return value


def validate_queues(queues: Iterable[str] | None) -> list[str] | None:
    """A worker's `queues=`: the queues it serves; None means every queue."""
    if queues is None:
        return None
    if isinstance(queues, str):
        raise TypeError("queues must be a collection of str, not a single str")
    checked = sorted({validate_queue(q) for q in queues})
    if not checked:
        raise ValueError("queues must name at least one queue (or be None for all queues)")
    return checked


def validate_priority(priority: object) -> int:
    """A priority: an int from -100 to 100, larger first."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(
            f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY} (larger runs first), "
            f"got {priority}"
        )
    return priority


def validate_unique(
    key: object, scope: object, window: object, on_duplicate: object
) -> Unique | None:
    """The uniqueness rule of one job, or None when it has no `unique_key`.

    ``unique``, ``unique_for`` and ``on_duplicate`` are checked even without a
    key, so that a typo is refused rather than silently ignored."""
    if scope not in UNIQUE_SCOPES:
        raise ValueError(
            f"unique must be one of {', '.join(map(repr, UNIQUE_SCOPES))}, got {scope!r}"
        )
    if on_duplicate not in ON_DUPLICATE:
        known = ", ".join(map(repr, ON_DUPLICATE))
        raise ValueError(f"on_duplicate must be one of {known}, got {on_duplicate!r}")
    if window is not None:
        window = validate_timeout(window, "unique_for")
        if window > MAX_DELAY:
            raise ValueError(f"unique_for must be at most {MAX_DELAY.days} days, got {window}")
    if key is None:
        if window is not None:
            raise ValueError("unique_for needs a unique_key")
        return None
    assert isinstance(scope, str) and isinstance(on_duplicate, str)
    return Unique(_validate_name(key, "unique_key"), scope, window, on_duplicate)


def validate_delay(value: object, name: str) -> timedelta:
    """A wait before a job is due (``delay``, ``retry_in``): from 0 to `MAX_DELAY`."""
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, not {type(value).__name__}")
    if value < timedelta(0):
        raise ValueError(f"{name} must not be negative, got {value}")
    if value > MAX_DELAY:
        raise ValueError(f"{name} must be at most {MAX_DELAY.days} days, got {value}")
    return value


def validate_specs(specs: Iterable[SpecLike]) -> list[ValidatedSpec]:
    """Validate every spec of a batch before anything is written."""
    checked: list[ValidatedSpec] = []
    valid_kinds: set[str] = set()  # a batch repeats a few kinds: check each once
    for spec in specs:
        if (
            type(spec) is tuple
            and len(spec) == 2
            and type(spec[0]) is str
            and spec[0] in valid_kinds
        ):
            checked.append(ValidatedSpec(spec[0], encode_payload(spec[1]), None, _NO_DELAY, 3))
        elif isinstance(spec, JobSpec):
            checked.append(
                validate_spec(
                    spec.kind,
                    spec.payload,
                    run_at=spec.run_at,
                    delay=spec.delay,
                    max_attempts=spec.max_attempts,
                    queue=spec.queue,
                    priority=spec.priority,
                    unique_key=spec.unique_key,
                    unique=spec.unique,
                    unique_for=spec.unique_for,
                    on_duplicate=spec.on_duplicate,
                    result_ttl=spec.result_ttl,
                    limit_key=spec.limit_key,
                    depends_on=spec.depends_on,
                )
            )
        elif isinstance(spec, tuple) and len(spec) == 2:
            checked.append(validate_spec(spec[0], spec[1]))
            valid_kinds.add(spec[0])
        else:
            raise TypeError(f"expected a JobSpec or a (kind, payload) tuple, got {spec!r:.80}")
    return checked


def validate_table_name(table: object) -> tuple[str, ...]:
    """Split `table` or `schema.table` into its parts, refusing anything unsafe."""
    if not isinstance(table, str):
        raise TypeError(f"table name must be a str, not {type(table).__name__}")
    parts = tuple(table.split("."))
    if len(parts) > 2 or not all(_IDENTIFIER.match(p) for p in parts):
        raise ValueError(
            f"unsafe table name {table!r}: use letters, digits and underscores, "
            "optionally as schema.table"
        )
    if len(parts[-1]) > MAX_TABLE_NAME_LENGTH or len(parts[0]) > MAX_IDENTIFIER_LENGTH:
        raise ValueError(f"table name {table!r} is too long (at most {MAX_TABLE_NAME_LENGTH})")
    # pg_temp (a session's own schema: its jobs vanish with the connection)
    # and the system schemas are no place for a queue.
    if len(parts) == 2 and (parts[0].lower().startswith("pg_") or parts[0] == "information_schema"):
        raise ValueError(
            f"table name {table!r} is in a temporary or system schema: choose another schema"
        )
    return parts


def wrong_connection(conn: object, expected: str) -> TypeError:
    """The error for a ``conn=`` that is not a psycopg connection: its full
    type name, and for a framework's own connection object, the helper that
    gives the psycopg connection under it."""
    kind = type(conn)
    name = f"{kind.__module__}.{kind.__qualname__}"
    hint = ""
    if kind.__module__.split(".")[0] == "sqlalchemy":
        hint = (
            "; from a SQLAlchemy session, pass pgqueue.contrib.sqlalchemy.psycopg_connection"
            "(session) (async: async_psycopg_connection)"
        )
    elif kind.__module__.split(".")[0] == "django":
        hint = "; in Django, pgqueue.contrib.django.connection() is the psycopg connection"
    return TypeError(f"conn must be {expected}, not {name}{hint}")


def validate_limit(limit: object, name: str = "limit") -> int:
    """A count of at least 1 (a claim's limit, a concurrency), named as the caller names it."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"{name} must be an int, not {type(limit).__name__}")
    if limit < 1:
        raise ValueError(f"{name} must be at least 1, got {limit}")
    return limit


def validate_timeout(value: object, name: str) -> timedelta:
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, not {type(value).__name__}")
    if value <= timedelta(0):
        raise ValueError(f"{name} must be positive, got {value}")
    return value


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


def error_text(error: object) -> str:
    """What a failure stores in `last_error`: the exception type and message."""
    if isinstance(error, BaseException):
        message = str(error)
        text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    else:
        text = str(error)
    # text columns cannot hold NUL; keep the rest as it is.
    return text.replace("\x00", "\\0")


# What `stats()` measures leases against unless told otherwise: the workers' default.
DEFAULT_VISIBILITY_TIMEOUT = timedelta(minutes=5)


def validate_claim_bytes(value: object) -> int | None:
    """A worker's byte budget per claim: a positive int, or None for none."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"claim_bytes must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"claim_bytes must be at least 1, got {value}")
    return value


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


def validate_age(value: object, name: str) -> timedelta:
    """A timedelta of zero or more, for ``older_than=``-style arguments."""
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, not {type(value).__name__}")
    if value < timedelta(0):
        raise ValueError(f"{name} must not be negative, got {value}")
    return value


def validate_job_id(value: object, name: str) -> int:
    """A job id given as an int (a bool is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value
