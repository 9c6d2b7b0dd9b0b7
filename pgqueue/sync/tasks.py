"""`Task`: a function made a job kind of a `Queue` (`Queue.task`).

Generated from ``pgqueue/aio/tasks.py`` by ``tools/unasync.py``: do not edit.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from ..core.jobs import JobSpec
from ..core.tasks import TaskDefinition, TaskOptions, TaskOverrides
from .driver import CallerConnection

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .queue import Queue

__all__ = ["Task"]

P = ParamSpec("P")
R = TypeVar("R")


class _Own:
    """`Task.options` was not given ``conn``: keep the one it had."""


_KEEP = _Own()


class Task(Generic[P, R]):
    """A typed function whose calls can be enqueued as jobs, made by `Queue.task`:

        @queue.task(max_attempts=5)
        def send_receipt(order_id: int, *, resend: bool = False) -> None:
            ...

        send_receipt.enqueue(42)                       # a job of this kind
        send_receipt.options(conn=conn, delay=timedelta(minutes=5)).enqueue(42)
        send_receipt(42)                               # a direct call, no job

    Calling the task calls the function. `enqueue` binds the arguments
    against the function's signature and checks that JSON carries them
    unchanged, then enqueues a job of the task's `kind` whose payload holds
    them; bad arguments raise `TypeError` or `ValueError` and nothing is
    written. Job options (``conn``, ``delay``, ``run_at``, ``priority`` ...)
    are never mixed with the function's arguments: `options` returns a copy
    of the task that enqueues with them. A worker made for the queue with no
    handlers runs the queue's tasks (see docs/tasks.md).
    """

    def __init__(
        self,
        queue: Queue,
        definition: TaskDefinition[P, R],
        options: TaskOptions,
        conn: CallerConnection | None = None,
    ) -> None:
        self.queue = queue
        self.definition = definition
        self.job_options = options
        self.conn = conn
        functools.update_wrapper(self, definition.fn)

    @property
    def kind(self) -> str:
        """The kind of the task's jobs (by default the function's module-qualified name)."""
        return self.definition.kind

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function itself, here and now: no job."""
        return self.definition.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kind}>"

    def options(
        self, *, conn: CallerConnection | _Own | None = _KEEP, **changes: Unpack[TaskOverrides]
    ) -> Task[P, R]:
        """A copy of the task that enqueues with these options; the task is unchanged.

        ``conn`` enqueues in the caller's transaction (None: the queue
        commits the job itself); the others are those of
        `Queue.enqueue` (``run_at``, ``delay``, ``queue``, ``priority``,
        ``max_attempts``, ``unique_key``, ``unique``, ``unique_for``,
        ``on_duplicate``, ``result_ttl``, ``limit_key``). ``unique_key`` and
        ``limit_key`` may be functions of the task's arguments. Checked
        here: a bad option raises `TypeError` or `ValueError`.
        """
        options = self.job_options.changed(self.kind, changes)
        return type(self)(self.queue, self.definition, options,
                          self.conn if isinstance(conn, _Own) else conn)  # fmt: skip

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """The job that `enqueue` would write for these arguments, as a `JobSpec`
        for `Queue.enqueue_many` (a batch of several tasks' jobs)."""
        return self.definition.spec(self.job_options, args, kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueue a job that calls the function with these arguments; return its id.

        As `Queue.enqueue`, with the task's options: with a ``conn``
        (`options`), the job is written in the caller's transaction.
        """
        s = self.definition.spec(self.job_options, args, kwargs)
        return self.queue._enqueue_spec(s, self.conn)

    def enqueue_many(self, calls: Iterable[tuple[Any, ...] | Mapping[str, Any]]) -> list[int]:
        """Enqueue one job per call, in one transaction; return their ids in order.

        Each call is a tuple of positional arguments or a dict of keyword
        arguments (``[(1,), (2,)]``, ``[{"order_id": 1}]``); every one is
        bound and checked before anything is written. As
        `Queue.enqueue_many`, with the task's options.
        """
        specs = self.definition.specs(self.job_options, calls)
        return self.queue.enqueue_many(specs, conn=self.conn)
