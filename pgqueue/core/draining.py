"""The testing helpers' decisions (`pgqueue.testing`), with no I/O.

`Drain` runs a queue's ready jobs one at a time through the worker's own
turn (`pgqueue.core.queue.turn.Turns.turn`): each turn records the last
run's outcome and claims the next job, with the real claim and the real
outcome statements. Its only choices of its own: a failure is retried at
once (``retry_in=0``: the same state machine, no backoff), and with
``with_scheduled`` the jobs due later are made due now (`PROMOTE`) when no
job is ready. The backends (`pgqueue.aio.draining`, generated into
`pgqueue.sync.draining`) perform the plans and call the handlers.

`enqueued` reads the jobs a test asserts on: pending and waiting ones,
their payload matched by JSON containment (``@>``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from .context import CURRENT, JobContext
from .jobs import (
    Job,
    JobStatus,
    encode_payload,
    validate_kind,
    validate_limit,
    validate_queue,
    validate_queues,
)
from .ops import Failure, QueueCore, Turn, WorkerClaim
from .plans import Operation, fetch
from .queue.table import Table
from .results import encode_result
from .states import Event
from .tasks import TaskDefinition, task_of
from .worker import Handlers, MissingHandler, describe_error

__all__ = [
    "Drain",
    "Drained",
    "HandlerCall",
    "Ran",
    "build_job",
    "enqueued",
    "enqueued_message",
    "handler_call",
    "returned",
    "task_job",
]

# Pending and waiting jobs (a workflow's: `depends_on`), by name: a table
# whose schema has no waiting status simply has none.
ENQUEUED: Final = """
SELECT {cols} FROM {table}
 WHERE status IN ('pending', 'waiting')
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
   AND (%(payload)s::jsonb IS NULL OR payload @> %(payload)s::jsonb)
 ORDER BY id"""

# `drain(with_scheduled=True)`: the jobs due later, due now.
PROMOTE: Final = """
UPDATE {table} SET run_at = now()
 WHERE status = 'pending' AND run_at > now()
   AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
RETURNING id"""

# The most runs of one drain: handlers that enqueue jobs forever end in an error.
MAX_RUNS = 10_000


def wrong_queue(q: object, expected: str) -> TypeError:
    """The error of a helper given the other kind of queue (or no queue)."""
    return TypeError(
        f"expected a pgqueue.{expected}, not {type(q).__name__}: the helpers of a "
        "pgqueue.Queue are enqueued, assert_enqueued, assert_not_enqueued and drain; "
        "of a pgqueue.AsyncQueue, aenqueued, aassert_enqueued, aassert_not_enqueued "
        "and adrain, awaited"
    )


def enqueued(
    core: QueueCore, kind: str | None, payload: Any, queue: str | None
) -> Operation[list[Job]]:
    """The pending and waiting jobs of ``kind`` and ``queue`` (any if None)
    whose payload contains ``payload`` (any if None), in id order."""
    params = {
        "kind": None if kind is None else validate_kind(kind),
        "queue": None if queue is None else validate_queue(queue),
        "payload": None if payload is None else encode_payload(payload),
    }
    statement = Table.named(core.table).render(ENQUEUED)
    return fetch(statement, params, lambda rows: [Job.from_row(r) for r in rows])


def enqueued_message(
    wanted: str, found: Sequence[Job], every: Sequence[Job], *, limit: int = 20
) -> str:
    """An assertion's message: what was wanted, what matched, and every job
    enqueued (the near misses), the first ``limit`` of them."""
    lines = [f"{wanted}; {len(found)} matched."]
    if not every:
        lines.append("No job is enqueued.")
    else:
        lines.append(f"Enqueued ({len(every)}):")
        for job in every[:limit]:
            lines.append(
                f"  {job.id} {job.kind} queue={job.queue} status={job.status} "
                f"payload={encode_payload(job.payload)[:200]}"
            )
        if len(every) > limit:
            lines.append(f"  ... and {len(every) - limit} more")
    return "\n".join(lines)


def describe_wanted(
    verb: str, kind: str | None, payload: Any, queue: str | None, count: int | None
) -> str:
    """``expected 2 job(s) of kind 'send_receipt' with payload containing {...}``,
    for an assertion's message."""
    what = f"{count} job(s)" if count is not None else "a job"
    parts = [f"{verb} {what} of kind {kind!r}" if kind is not None else f"{verb} {what}"]
    if payload is not None:
        parts.append(f"with payload containing {encode_payload(payload)}")
    if queue is not None:
        parts.append(f"in queue {queue!r}")
    return " ".join(parts)


@dataclass(slots=True)
class Drained:
    """What a drain ran (`pgqueue.testing.drain`), as lists of job ids in the
    order their outcomes were recorded: ``succeeded``; ``failed``, one entry
    per run that failed and was retried; ``dead``, the jobs that failed
    their last attempt; ``cancelled``, the jobs whose cancel was requested
    while they ran."""

    succeeded: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)

    @property
    def ran(self) -> int:
        """How many runs there were."""
        return len(self.succeeded) + len(self.failed) + len(self.dead) + len(self.cancelled)


@dataclass(frozen=True, slots=True)
class Ran:
    """How one call of a handler ended: its return value as JSON text (for a
    job that keeps it), or what it raised."""

    result: str | None = None
    error: BaseException | None = None
    value: Any = None  # what it returned, as it returned it


@dataclass(frozen=True, slots=True)
class HandlerCall:
    """One job's handler, to be called in the job's context (`job_context()`):
    `run` for a plain handler, `arun` for an ``async def`` one."""

    handler: Callable[..., Any] | None
    context: JobContext
    is_async: bool
    known: tuple[str, ...] = ()

    def run(self) -> Ran:
        """Call a plain handler (or an ``async def`` one's `arun`, with
        ``anyio.run``) here, in the job's context."""
        token = CURRENT.set(self.context)
        try:
            value = self._handler()(self.context.job)
            return self._ended(value)
        except Exception as exc:
            return Ran(error=exc)
        finally:
            CURRENT.reset(token)

    async def arun(self) -> Ran:
        """Await an ``async def`` handler in the job's context."""
        token = CURRENT.set(self.context)
        try:
            value = await self._handler()(self.context.job)
            return self._ended(value)
        except Exception as exc:
            return Ran(error=exc)
        finally:
            CURRENT.reset(token)

    def _handler(self) -> Callable[..., Any]:
        if self.handler is None:
            raise MissingHandler(self.context.job.kind, list(self.known))
        return self.handler

    def _ended(self, value: Any) -> Ran:
        job = self.context.job
        result = None if job.result_ttl is None else encode_result(value, job.kind)
        return Ran(result, value=value)


class Drain:
    """One drain of a queue: its turns, the outcomes it has to record, and
    what it ran. Owned by one `drain` call; nothing else writes it."""

    def __init__(
        self,
        core: QueueCore,
        handlers: Mapping[str, Callable[..., Any]],
        *,
        queues: Iterable[str] | None = None,
        with_scheduled: bool = False,
        max_runs: int = MAX_RUNS,
    ) -> None:
        if not isinstance(with_scheduled, bool):
            raise TypeError(f"with_scheduled must be a bool, not {type(with_scheduled).__name__}")
        self.core = core
        self.handlers = Handlers(handlers)
        self.queues = validate_queues(queues)
        self.with_scheduled = with_scheduled
        self.worker = f"pgqueue.testing:{uuid.uuid4().hex[:8]}"
        self.claim = WorkerClaim.of(self.worker, queues=self.queues)
        self.max_runs = validate_limit(max_runs, "max_runs")
        self.drained = Drained()
        # Whether the last turn recorded no outcome (and so saw every ready job).
        self.idle = False
        # The outcomes of the last run, recorded by the next turn.
        self._succeeded: list[int] = []
        self._failures: list[Failure] = []
        self._results: dict[int, str] = {}

    def turn(self) -> Operation[Turn]:
        """Record the last run's outcome and claim the next ready job."""
        return self.core.turns.turn(
            self._succeeded, self._failures, self.claim, 1, results=self._results
        )

    def took(self, turn: Turn) -> Job | None:
        """Note what a turn recorded; the job it claimed, or None."""
        # A turn's claim cannot see the rows its own outcomes wrote (a retry
        # due now): only a turn that recorded nothing finds the queue empty.
        self.idle = not self._succeeded and not self._failures
        self.drained.succeeded.extend(turn.completed)
        for job_id, status in turn.failed.items():
            if status is JobStatus.DEAD:
                self.drained.dead.append(job_id)
            elif status is JobStatus.CANCELLED:
                self.drained.cancelled.append(job_id)
            else:
                self.drained.failed.append(job_id)
        self._succeeded, self._failures, self._results = [], [], {}
        if not turn.claimed:
            return None
        if self.drained.ran >= self.max_runs:
            job = turn.claimed[0]
            raise RuntimeError(
                f"drain ran {self.drained.ran} jobs and claimed one more ({job.id}, "
                f"{job.kind}): do the handlers enqueue jobs forever?"
            )
        return turn.claimed[0]

    def promote(self) -> Operation[int]:
        """`with_scheduled`: make the jobs due later due now; how many there were."""
        statement = Table.named(self.core.table).render(PROMOTE)
        return fetch(statement, {"queues": self.queues}, len)

    def call(self, job: Job) -> HandlerCall:
        """The call of ``job``'s handler (a `MissingHandler` failure if it has none)."""
        return HandlerCall(
            self.handlers.get(job.kind),
            JobContext(job, self.worker),
            self.handlers.is_async(job.kind),
            tuple(self.handlers.kinds()),
        )

    def ran(self, job: Job, ran: Ran) -> None:
        """Keep ``job``'s outcome for the next turn: a failure is retried at once."""
        if ran.error is None:
            self._succeeded = [job.id]
            if ran.result is not None:
                self._results = {job.id: ran.result}
            return
        failure = self.core.failure(
            job, describe_error(ran.error), retry_in=timedelta(0), event=Event.FAIL
        )
        self._failures = [failure]


# -- one handler, no database (`pgqueue.testing.run_job`) -----------------------

TEST_WORKER = "pgqueue.testing"


def build_job(kind: str, payload: Any = None, **fields: Any) -> Job:
    """A `Job` as a worker would hand it to its handler (running, first
    attempt, id 1), with ``fields`` (`Job`'s own: ``id``, ``attempts``,
    ``queue``, ``result_ttl`` ...) changed. The payload goes through JSON,
    as it does through the table."""
    now = datetime.now(UTC)
    values: dict[str, Any] = {
        "id": 1, "kind": validate_kind(kind), "payload": json.loads(encode_payload(payload)),
        "attempts": 1, "max_attempts": 3, "status": JobStatus.RUNNING, "run_at": now,
        "last_error": None, "locked_by": TEST_WORKER, "locked_at": now, "created_at": now,
    }  # fmt: skip
    unknown = fields.keys() - {f.name for f in dataclasses.fields(Job)}
    if unknown:
        raise TypeError(f"Job has no field {', '.join(sorted(unknown))}")
    return Job(**{**values, **fields})


def task_job(task: object, *args: Any, **kwargs: Any) -> Job:
    """The job `task.enqueue(*args, **kwargs)` would write, as `build_job` builds it."""
    definition = definition_of(task)
    if definition is None:
        raise TypeError(f"expected a task (made by @queue.task), not {type(task).__name__}")
    return build_job(definition.kind, definition.payload(args, kwargs))


def definition_of(target: object) -> TaskDefinition[Any, Any] | None:
    """The task definition behind a task (`AsyncTask`, `Task`), a definition,
    or a task's handler; None for anything else."""
    if isinstance(target, TaskDefinition):
        return target
    definition = getattr(target, "definition", None)
    if isinstance(definition, TaskDefinition):
        return definition
    return task_of(target)


def handler_call(target: Callable[..., Any], job: Job) -> HandlerCall:
    """The call of a handler (or a task's) on ``job``, in a context of its own."""
    if not isinstance(job, Job):
        raise TypeError(f"expected a pgqueue.Job (see build_job), not {type(job).__name__}")
    definition = definition_of(target)
    handler = definition.handler() if definition is not None else target
    if not callable(handler):
        raise TypeError(f"expected a handler or a task, not {type(target).__name__}")
    is_async = inspect.iscoroutinefunction(handler)
    return HandlerCall(handler, JobContext(job, TEST_WORKER), is_async)


def returned(ran: Ran) -> Any:
    """What the handler returned; what it raised, raised again."""
    if ran.error is not None:
        raise ran.error
    return ran.value
