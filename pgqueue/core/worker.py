"""A worker's settings and decisions, with no I/O: what to do with each outcome."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
import socket
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypedDict, TypeVar

from .backoff import Backoff
from .events import EventListener
from .jobs import (
    DEFAULT_VISIBILITY_TIMEOUT,
    validate_claim_bytes,
    validate_kind,
    validate_kinds,
    validate_limit,
    validate_queues,
    validate_timeout,
)
from .ops import Failure
from .states import Event

__all__ = [
    "ABORT_FLUSH",
    "CANCELLED",
    "CLAIM_CUT",
    "CANCELLED_UNSTARTED",
    "INTERRUPTED",
    "RETRY_BACKOFF",
    "Handlers",
    "Outcome",
    "WorkerOptions",
    "WorkerSettings",
    "check_worker_options",
    "describe_error",
    "describe_jobs",
    "unique_worker_name",
]

H = TypeVar("H", bound=Callable[..., Any])

MAX_ERROR_LENGTH = 4000

INTERRUPTED = "interrupted: the worker shut down before the job finished"

# The `last_error` of a job whose cancel was requested: an async handler
# cancelled through its scope, a job cancelled before it started, or the
# prefix of what a plain handler raised once asked to stop.
CANCELLED = "cancelled: the job's cancel was requested while it ran"
CANCELLED_UNSTARTED = "cancelled: the job's cancel was requested before it started"

# Every loop of a worker that retries after a database error waits this
# long: 0.1 s doubling to 10 s, stretched by up to half (so that workers
# cut off together do not come back together).
RETRY_BACKOFF = Backoff(
    base=timedelta(seconds=0.1), factor=2.0, cap=timedelta(seconds=10), jitter=0.5
)

# How long an outcome waits for a claim to carry it before the completer
# writes it on its own.
OUTCOME_LINGER = 0.02

# A database call still waiting after this many seconds is logged as stalled
# (a lock held on the queue table, no free connection in the pool, a slow
# server), and again when it returns.
STALL_WARNING = 5.0

# The longest a stopping worker waits for a claim in flight (a healthy one
# takes milliseconds): one still waiting, on a server that refuses
# connections or does not answer, is given up, and what it may have
# claimed comes back through the lease. The grace period is the handlers'.
CLAIM_CUT = 1.0

# The longest a stopping worker tries to write its last outcomes (after the
# grace period; a healthy write takes milliseconds), and after a second
# signal; those it could not write come back through their lease.
FLUSH_DEADLINE = 2.0
ABORT_FLUSH = 1.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one run of a job ended, ready to be written."""

    failure: Failure | None  # None: success
    cause: Event = Event.SUCCEED  # what the failure was decided for: FAIL, EXPIRE, RELEASE, CANCEL
    duration: float | None = None  # the handler's run time, when listeners want it
    result: str | None = None  # a success's return value as JSON, for a job with result_ttl


SUCCESS = Outcome(None)

# How much one new run time or claim round trip moves a `Pace`'s averages.
PACE_WEIGHT = 0.2
# About the longest (seconds) a job claimed beyond one per runner waits for
# a runner; two claim round trips when those take longer.
HOLD_FOR = 0.01


@dataclass(eq=False, slots=True)
class Pace:
    """How many jobs a worker holds: one per runner, and beyond that the jobs
    its runners finish in `HOLD_FOR` (`ahead`), so that no runner idles
    while a claim makes its round trip. A job held beyond that waits here
    while a runner of another worker may be free. Until a handler has run,
    nothing beyond one job per runner. The fetcher's; the completer reports
    run times."""

    concurrency: int
    batch_size: int
    run_time: float | None = None  # seconds a handler runs (moving average); None: none ran
    round_trip: float = 0.001  # seconds a claim takes (moving average)
    limit: int = 0  # the most jobs a claim asks for: the batch size, halved by `cancelled`

    def __post_init__(self) -> None:
        self.limit = self.batch_size

    def ran(self, seconds: float) -> None:
        """A handler ran for ``seconds``."""
        if self.run_time is None:
            self.run_time = seconds
        else:
            self.run_time += (seconds - self.run_time) * PACE_WEIGHT

    def claimed(self, seconds: float) -> None:
        """A claim took ``seconds``, from sending to landing."""
        self.round_trip += (seconds - self.round_trip) * PACE_WEIGHT

    def ahead(self) -> int:
        """Jobs to hold beyond one per runner: those the runners finish in
        `HOLD_FOR` (or two claim round trips); a whole batch for handlers
        quicker than that."""
        if self.run_time is None:
            return 0
        finished = self.concurrency * max(HOLD_FOR, 2 * self.round_trip)
        if finished >= self.batch_size * self.run_time:
            return self.batch_size
        return int(finished / self.run_time)

    def low_water(self) -> int:
        """How few jobs may be left unstarted, with every runner busy and no
        claim in flight, before `size` asks for more: the runners wake the
        fetcher there, so that the claim lands before they run dry (-1 with
        nothing held ahead: a runner asks once it is free)."""
        ahead = self.ahead()
        return ahead - max(1, min(ahead, self.limit) // 2)

    def size(self, held: int, starved: bool) -> int:
        """How many jobs to claim now, ``held`` being claimed, running or on
        their way (0: no claim yet): enough for every runner and `ahead`
        (twice that when the runners ran dry waiting for the last claim);
        claimed once a runner is free or, for handlers quicker than a claim,
        once what is held is down by half a batch, then whole batches."""
        ahead = self.ahead()
        if starved:
            ahead += min(ahead, self.limit)
        wanted = self.concurrency + ahead - held
        if wanted < max(1, min(ahead, self.limit) // 2):
            return 0
        return self.limit if ahead >= self.limit else self._shaped(min(wanted, self.limit))

    def _shaped(self, wanted: int) -> int:
        """``wanted``, or fewer: the largest power of two, `concurrency` or
        `limit` up to it. A claim's size is written into its statement
        (`ClaimSpec`), which the server plans anew until the connection has
        run it five times (psycopg prepares it then): a handful of sizes are
        soon all prepared, a size per claim never was (a turn planned each
        time took 3.4 ms instead of about 1)."""
        if wanted >= self.limit:
            return self.limit
        shaped = 1 << (wanted.bit_length() - 1)
        return max(shaped, self.concurrency) if self.concurrency <= wanted else shaped

    def cancelled(self, size: int) -> bool:
        """A claim of ``size`` jobs was cancelled by the server (a role's
        ``statement_timeout``): claims ask for half as many at most from now
        on, down to one. True if that is fewer than it asked (a claim sent
        before an earlier one was cancelled is fewer already), False if it
        asked for one."""
        if size == 1:
            return False
        self.limit = min(self.limit, size // 2)
        return True


def describe_jobs(jobs: Iterable[Any], limit: int = 20) -> str:
    """``"12 (send_receipt), 13 (send_receipt)"``: jobs for a log line, the first ``limit``."""
    listed = list(jobs)
    text = ", ".join(f"{j.id} ({j.kind})" for j in listed[:limit])
    return f"{text} and {len(listed) - limit} more" if len(listed) > limit else text


def unique_worker_name() -> str:
    """``host:pid:suffix``: unique per worker, readable in ``locked_by``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _seconds(value: float | timedelta | None, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be seconds or a timedelta, not {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return float(value)


def _conninfo(value: str | None) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"listen_conninfo must be a str, not {type(value).__name__}")
    return value


class WorkerOptions(TypedDict, total=False):
    """The keyword options `AsyncWorker` takes, which `Worker` passes through."""

    concurrency: int
    batch_size: int
    kinds: Iterable[str] | None
    queues: Iterable[str] | None
    poll_interval: float | timedelta
    job_timeout: float | timedelta | None
    visibility_timeout: timedelta
    grace_period: float | timedelta
    name: str | None
    handle_signals: bool
    on_event: EventListener | Sequence[EventListener] | None
    listen_conninfo: str | None
    call_timeout: float | timedelta
    claim_bytes: int | None


def check_worker_options(options: Mapping[str, object], where: str) -> None:
    """Refuse, before any worker is made, options that `AsyncWorker` (and
    `Worker`) would refuse: an unknown name (with the nearest known one) or
    a bad value. ``where`` names the setting they came from."""
    known = sorted(WorkerOptions.__optional_keys__)
    for name in options:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else f"; known: {', '.join(known)}"
            raise TypeError(f"{where}: unknown worker option {name!r}{hint}")
    settings = {f.name for f in dataclasses.fields(WorkerSettings)}
    given = {k: v for k, v in options.items() if k in settings}
    defaults = WorkerSettings()
    try:
        WorkerSettings.build(**{**{n: getattr(defaults, n) for n in settings}, **given})
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{where}: {exc}") from None


@dataclass(frozen=True)
class WorkerSettings:
    """A worker's validated settings; see `AsyncWorker` for their meaning."""

    concurrency: int = 4
    batch_size: int = 100
    kinds: list[str] | None = None
    queues: list[str] | None = None
    poll_interval: float = 1.0
    job_timeout: float | None = None
    visibility_timeout: timedelta = DEFAULT_VISIBILITY_TIMEOUT
    grace_period: float = 30.0
    name: str = field(default_factory=unique_worker_name)
    listen_conninfo: str | None = None
    call_timeout: float = 60.0
    claim_bytes: int | None = None

    @classmethod
    def build(
        cls,
        *,
        concurrency: int,
        batch_size: int,
        kinds: Iterable[str] | None,
        poll_interval: float | timedelta,
        queues: Iterable[str] | None = None,
        job_timeout: float | timedelta | None,
        visibility_timeout: timedelta,
        grace_period: float | timedelta,
        name: str | None,
        listen_conninfo: str | None = None,
        call_timeout: float | timedelta = 60.0,
        claim_bytes: int | None = None,
    ) -> WorkerSettings:
        poll = _seconds(poll_interval, "poll_interval")
        grace = _seconds(grace_period, "grace_period")
        assert poll is not None and grace is not None
        return cls(
            concurrency=validate_limit(concurrency, "concurrency"),
            batch_size=validate_limit(batch_size, "batch_size"),
            kinds=validate_kinds(kinds),
            queues=validate_queues(queues),
            poll_interval=poll,
            job_timeout=_seconds(job_timeout, "job_timeout"),
            visibility_timeout=validate_timeout(visibility_timeout, "visibility_timeout"),
            grace_period=grace,
            name=validate_kind(name) if name is not None else unique_worker_name(),
            listen_conninfo=_conninfo(listen_conninfo),
            call_timeout=_seconds(call_timeout, "call_timeout") or 60.0,
            claim_bytes=validate_claim_bytes(claim_bytes),
        )

    @property
    def heartbeat_interval(self) -> float:
        """How often running jobs' leases are renewed: well inside the timeout."""
        return self.visibility_timeout.total_seconds() / 4

    @property
    def reap_interval(self) -> float:
        """How often this worker looks for other workers' expired leases."""
        return min(self.visibility_timeout.total_seconds() / 2, 60.0)


class Handlers:
    """Which function runs which kind of job.

    >>> handlers = Handlers()
    >>> @handlers.register("send_receipt")
    ... def send_receipt(job): ...
    >>> handlers.get("send_receipt") is send_receipt
    True
    """

    def __init__(self, handlers: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self._by_kind: dict[str, Callable[..., Any]] = {}
        self._async: set[str] = set()
        for kind, fn in (handlers or {}).items():
            self.add(kind, fn)

    def add(self, kind: str, fn: Callable[..., Any]) -> None:
        validate_kind(kind)
        if not callable(fn):
            raise TypeError(f"the handler for {kind!r} is not callable")
        self._by_kind[kind] = fn
        if inspect.iscoroutinefunction(fn):
            self._async.add(kind)
        else:
            self._async.discard(kind)

    def register(self, kind: str) -> Callable[[H], H]:
        def decorate(fn: H) -> H:
            self.add(kind, fn)
            return fn

        return decorate

    def get(self, kind: str) -> Callable[..., Any] | None:
        return self._by_kind.get(kind)

    def is_async(self, kind: str) -> bool:
        """Whether the handler of ``kind`` is a coroutine function."""
        return kind in self._async

    def kinds(self) -> list[str]:
        return sorted(self._by_kind)


class MissingHandler(LookupError):
    """A claimed job's kind has no handler in this worker."""

    def __init__(self, kind: str, known: list[str]) -> None:
        super().__init__(f"no handler for job kind {kind!r} (this worker handles {known})")


def describe_error(exc: BaseException) -> str:
    """What `last_error` keeps: type, message and the last frames of the traceback."""
    head = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    frames = traceback.format_tb(exc.__traceback__, limit=-3) if exc.__traceback__ else []
    text = head + ("\n" + "".join(frames).rstrip() if frames else "")
    if len(text) > MAX_ERROR_LENGTH:
        text = text[: MAX_ERROR_LENGTH - 3] + "..."
    return text.replace("\x00", "\\0")
