"""What a worker tells its listeners: one `JobEvent` per thing that happened to a job.

No I/O here. A worker emits an event only once the outcome it reports is
written (or, for `EventName.CLAIMED`, once the claim returned): a listener
that counts ``SUCCEEDED`` events counts rows that are gone for good.

Not to be confused with `pgqueue.core.states.Event`, the state machine's
transitions: an `EventName` is what a worker observed, in words an
operator reads on a dashboard.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "ActionListener",
    "ActionName",
    "EventListener",
    "EventName",
    "JobEvent",
    "OperatorAction",
    "check_listener",
    "first_line",
    "listeners_from",
    "one_line",
]


class EventName(enum.StrEnum):
    """What happened to a job, as seen by the worker that reports it."""

    CLAIMED = "claimed"
    """The worker claimed the job (one attempt more); it will run soon."""
    SUCCEEDED = "succeeded"
    """The handler returned and the job's row is deleted."""
    FAILED = "failed"
    """The handler failed (raised, timed out, or had no handler) and the job
    is ``pending`` again, to be retried after its backoff."""
    DEAD = "dead"
    """The job failed on its last attempt, or its lease expired on its last
    attempt and this worker's reaper buried it: it is ``dead``."""
    RELEASED = "released"
    """The worker stopped before starting the job and gave it back to
    ``pending``, with its attempt."""
    INTERRUPTED = "interrupted"
    """The job was still running when the worker's grace period ran out: it
    is ``pending`` again, its attempt counted."""
    REAPED = "reaped"
    """This worker's reaper found the job's lease expired (its worker is
    presumed dead) and returned it to ``pending``."""
    CANCELLED = "cancelled"
    """The job's cancel was requested (`pgqueue.Queue.cancel`) while it was
    claimed or running, and its row is deleted: never retried, reaped back
    or marked dead. Reported by the worker that ran it (its handler was
    cancelled, stopped on ``job_context().cancel_requested``, or ended in
    any other way but success), or by a reaper for a job whose worker
    vanished (``kind`` None)."""


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One thing that happened to one job, reported by a worker to its listeners.

    >>> event = JobEvent(EventName.SUCCEEDED, 42, "send_receipt", "w1", "pgqueue_jobs",
    ...                  attempts=1, duration=0.012, queue="mail", priority=10)
    >>> f"{event.name} {event.kind}#{event.job_id} in {event.queue}"
    'succeeded send_receipt#42 in mail'
    """

    name: EventName
    job_id: int
    kind: str | None
    """The job's kind; None where the worker does not know it (`EventName.REAPED`,
    and `EventName.DEAD` from the reaper)."""
    worker: str
    """The name of the worker that reports the event (its ``locked_by``)."""
    table: str
    """The queue's table, as the queue was given it. (Before queues existed
    this field was called ``queue``; `queue` is now the job's queue.)"""
    attempts: int | None = None
    """The job's attempts counted so far, including the current one; None where unknown."""
    duration: float | None = None
    """Seconds the handler ran, for ``SUCCEEDED``, ``FAILED`` and ``DEAD`` after a run;
    None where no handler ran to the end."""
    error: str | None = None
    """The first line of the job's ``last_error`` (``FAILED``, ``DEAD``, ``INTERRUPTED``,
    ``CANCELLED`` from its worker)."""
    queue: str | None = None
    """The job's queue (`pgqueue.Job.queue`); None where the worker does not know
    the job (`EventName.REAPED`, and `EventName.DEAD` from the reaper)."""
    priority: int | None = None
    """The job's priority (`pgqueue.Job.priority`); None where `queue` is."""


EventListener = Callable[[JobEvent], object]
"""A callable that receives every `JobEvent` of a worker."""


class ActionName(enum.StrEnum):
    """What an operator did, through the web dashboard (`pgqueue.web`)."""

    RETRY = "retry"
    """Dead jobs back to pending (`pgqueue.Queue.retry`)."""
    PURGE = "purge"
    """Dead jobs deleted for good."""
    CANCEL = "cancel"
    """Jobs cancelled (`pgqueue.Queue.cancel`): waiting and dead ones removed,
    running ones asked to stop."""
    PAUSE_QUEUE = "pause_queue"
    RESUME_QUEUE = "resume_queue"
    PAUSE_SCHEDULE = "pause_schedule"
    RESUME_SCHEDULE = "resume_schedule"
    TRIGGER_SCHEDULE = "trigger_schedule"
    """A schedule's job enqueued now; `OperatorAction.job_ids` holds it."""
    SET_LIMIT = "set_limit"


@dataclass(frozen=True, slots=True)
class OperatorAction:
    """One action an operator took, reported once it is written.

    >>> action = OperatorAction(ActionName.RETRY, "pgqueue_jobs", "alice", job_ids=(7, 8))
    >>> f"{action.user} {action.name} {list(action.job_ids)}"
    'alice retry [7, 8]'
    """

    name: ActionName
    table: str
    """The queue's table."""
    user: str | None
    """Who did it, as the dashboard's ``authorize`` hook named them; None if it did not."""
    job_ids: tuple[int, ...] = ()
    """The jobs the action changed (retried, purged, cancelled, enqueued)."""
    target: str | None = None
    """The queue, schedule or limit key acted on."""
    detail: str | None = None
    """More, in words: the filter of an action on every matching job, a limit's value."""
    source: str = "dashboard"


ActionListener = Callable[[OperatorAction], object]
"""A callable that receives every `OperatorAction` of a dashboard."""


def listeners_from(on_event: EventListener | Sequence[EventListener] | None) -> list[EventListener]:
    """The listeners a worker's ``on_event=`` names: one callable, several, or none."""
    if on_event is None:
        return []
    if callable(on_event):
        check_listener(on_event)
        return [on_event]
    if isinstance(on_event, (str, bytes)) or not isinstance(on_event, Sequence):
        raise TypeError(
            f"on_event must be a callable or a sequence of callables, not {type(on_event).__name__}"
        )
    listeners = list(on_event)
    for fn in listeners:
        check_listener(fn)
    return listeners


def check_listener(fn: object) -> None:
    """Refuse what cannot be an event listener: not callable, or a coroutine function."""
    if not callable(fn):
        raise TypeError(f"an event listener must be callable, not {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn):
        raise TypeError(
            "an event listener must be a plain function: the worker calls it and does not "
            "await it; hand the event to a task or a queue for async work"
        )


def one_line(exc: BaseException | str) -> str:
    """A message on one line (libpq's span several); an exception without one, by its name."""
    return " ".join(str(exc).split()) or type(exc).__name__


def first_line(text: str | None) -> str | None:
    """The first line of an error text: what an event carries of ``last_error``."""
    if text is None:
        return None
    return text.split("\n", 1)[0]
