"""Where pgqueue records traces, with no tracing library: hooks that do nothing until set.

`pgqueue.otel.instrument()` (the ``otel`` extra) puts a `Tracer` in
`tracer`; until then it is None, and all that tracing costs is reading it:
an enqueue gets `NO_TRACE`, which stores no trace context on the job, and
a worker calls its handlers without a span. Nothing here imports a tracing
library, so ``import pgqueue`` never does either.

What is traced, and how (docs/tracing.md):

* ``enqueue`` and ``enqueue_many`` each make one span (`Trace`), whatever
  the number of jobs; its context, as a W3C ``traceparent``, is written on
  every job it adds (the ``trace_context`` column, migration 9).
* A worker makes one span per run of a handler (`Tracer.run`): a child of
  the job's stored context on the job's first attempt, a new trace linked
  to it on later attempts (`first_attempt`), so that a job retried for
  days does not stretch the trace of the request that enqueued it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Protocol

from .jobs import Job

__all__ = ["NO_TRACE", "Trace", "Tracer", "enqueue_many_trace", "enqueue_trace", "first_attempt"]


class Trace:
    """The span of one ``enqueue`` or ``enqueue_many`` call.

    The queue enters it around the operation's I/O (`Operation.trace`); the
    operation's plan reads `context` when it starts, to store it on each
    job, and reports the ids written (`enqueued`). This base records
    nothing: it is `NO_TRACE`, what every enqueue gets while tracing is off.
    """

    __slots__ = ()

    @property
    def context(self) -> str | None:
        """The ``traceparent`` to store on the jobs; None: store none."""
        return None

    def enqueued(self, ids: Sequence[int]) -> None:
        """(The plan.) The ids of the jobs written (or found, for a duplicate)."""

    def __enter__(self) -> Trace:
        return self

    def ended(self, exc: BaseException | None) -> None:
        """(On leaving it.) The operation's I/O is over: ``exc`` is what it raised, or None."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.ended(exc)


NO_TRACE = Trace()
"""The trace of an enqueue while tracing is off: stores nothing, records nothing."""


class Tracer(Protocol):
    """What `pgqueue.otel.instrument` installs in `tracer`."""

    def enqueue(self, table: str, kind: str, queue: str) -> Trace:
        """The span of one ``enqueue``, not yet begun (the queue enters it)."""
        ...

    def enqueue_many(self, table: str, count: int) -> Trace:
        """The span of one ``enqueue_many`` of ``count`` jobs, not yet begun."""
        ...

    def run(self, table: str, job: Job, worker: str | None) -> AbstractContextManager[object]:
        """The span of one run of ``job``'s handler, current while it runs
        (in the handler's task, or in its worker thread)."""
        ...


tracer: Tracer | None = None
"""The tracer in use; None while tracing is off (set by `pgqueue.otel`)."""


def enqueue_trace(table: str, kind: str, queue: str) -> Trace:
    """The trace of an ``enqueue`` (of a validated job): `NO_TRACE` while tracing is off."""
    current = tracer
    return NO_TRACE if current is None else current.enqueue(table, kind, queue)


def enqueue_many_trace(table: str, count: int) -> Trace:
    """The trace of an ``enqueue_many`` of ``count`` validated jobs."""
    current = tracer
    return NO_TRACE if current is None or not count else current.enqueue_many(table, count)


def first_attempt(job: Job) -> bool:
    """Whether this run is the job's first: its span is then a child of the
    enqueue's context, else only linked to it.

    A claim counts the attempt, so the first run has ``attempts == 1``; a
    release (a worker stopped before the job began) gives the attempt back,
    and an operator's `retry` of a dead job starts its attempts anew.

    >>> from datetime import datetime
    >>> from pgqueue.core.jobs import JobStatus
    >>> t = datetime(2024, 1, 1)
    >>> first_attempt(Job(1, "k", None, 1, 3, JobStatus.RUNNING, t, None, None, None, t))
    True
    """
    return job.attempts <= 1
