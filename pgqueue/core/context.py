"""`job_context()`: what a running handler can learn of its own run, with no I/O.

The worker's runners set a `JobContext` around every handler call: in the
runner task for an ``async def`` handler (tasks it starts inherit it), and
inside the worker thread for a plain one, job by job (a thread runs
several jobs one after another). Outside a handler there is none.

    def resize(job: pgqueue.Job) -> None:
        ctx = pgqueue.job_context()
        for image in job.payload["images"]:
            ctx.raise_if_cancelled()     # stop between steps once cancelled
            resize_one(image)
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from .jobs import Job

__all__ = ["CURRENT", "JobCancelled", "JobContext", "NoJobContext", "job_context"]


class JobCancelled(Exception):
    """Raised by `JobContext.raise_if_cancelled` once the job's cancel was requested.

    A handler may let it propagate (the job is recorded as cancelled and
    never retried) or catch it to clean up first.
    """


class NoJobContext(RuntimeError):
    """`job_context()` was called outside a job handler."""


class JobContext:
    """The run of one job, as its handler sees it (`pgqueue.job_context()`).

    Made by the worker's runners for each run (one per job: cheap, no lock).
    ``_cancelled`` is written by the runners only (on the event loop, from
    `AsyncQueue.cancel` through the worker's listener or heartbeat), once,
    False to True; the handler reads it, in any thread (a bool attribute is
    read and written whole).
    """

    __slots__ = ("_cancelled", "job", "worker")

    def __init__(self, job: Job, worker: str | None = None) -> None:
        self.job = job
        """The job being run (as claimed)."""
        self.worker = worker
        """The name of the worker running it (its ``locked_by``)."""
        self._cancelled = False

    @property
    def cancel_requested(self) -> bool:
        """Whether `cancel` asked this run to stop (safe to read from any thread)."""
        return self._cancelled

    @property
    def parents(self) -> dict[int, Any]:
        """Each job this one depends on directly (``depends_on``, chains,
        groups), by id, with its stored result value (jobs enqueued with
        ``result_ttl``), else None; empty for a job without dependencies.

        The values are those the statement that recorded each dependency's
        success wrote into this job's row: no query of its own."""
        return dict(self.job.parents or {})

    def raise_if_cancelled(self) -> None:
        """Raise `JobCancelled` if the job's cancel was requested; else nothing."""
        if self._cancelled:
            raise JobCancelled(f"job {self.job.id} ({self.job.kind}) was cancelled")

    def request_cancel(self) -> bool:
        """(The worker's runners.) Ask the run to stop; False if it was asked already."""
        if self._cancelled:
            return False
        self._cancelled = True
        return True

    def __repr__(self) -> str:
        state = "cancel requested" if self.cancel_requested else "running"
        return f"<JobContext of job {self.job.id} ({self.job.kind}), {state}>"


CURRENT: ContextVar[JobContext] = ContextVar("pgqueue.job_context")
"""The running handler's context: set (and reset) by the worker's runners
around each handler call, and only there."""


def job_context() -> JobContext:
    """The `JobContext` of the job whose handler is running here.

    Works in ``async def`` handlers (and the tasks they start) and in plain
    handlers (in their worker thread); raises `NoJobContext` (a
    `RuntimeError`) anywhere else.

    >>> try:
    ...     job_context()
    ... except RuntimeError as exc:
    ...     print(type(exc).__name__)
    NoJobContext
    """
    try:
        return CURRENT.get()
    except LookupError:
        raise NoJobContext(
            "pgqueue.job_context() was called outside a job handler: only a handler run "
            "by a pgqueue worker (and the tasks it starts) has a job context"
        ) from None
