"""`Worker`: the sync face of `AsyncWorker`.

A `Worker` runs the very same worker cycle as `AsyncWorker` on a private
asyncio event loop in the thread that calls `run()`; its handlers are
plain functions and run in ``concurrency`` worker threads, and it reaches
the database through the `Queue`'s own pool, from threads. No second copy
of the cycle exists to drift from the first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from ..aio.queue import AsyncQueue
from ..aio.worker import AsyncWorker
from ..core.events import EventListener
from ..core.health import HealthStamps
from ..core.jobs import DEFAULT_QUEUE
from ..core.schedules import Schedule
from ..core.tasks import task_of
from ..core.worker import Handlers, WorkerOptions, WorkerSettings
from .queue import Queue

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Worker"]

L = TypeVar("L", bound=EventListener)


class Worker:
    """Run handlers for the jobs of a `Queue`, in threads.

        worker = pgqueue.Worker(queue, concurrency=4)

        @worker.handler("send_receipt")
        def send_receipt(job: pgqueue.Job) -> None:
            mailer.send(job.payload["order_id"])

        worker.run()   # until stop(), SIGINT or SIGTERM

    The queue's tasks (`Queue.task`, registered before the worker is
    made) run beside the handlers given: a plain task in a thread, as any
    handler; an ``async def`` task on the worker's own event loop (asyncio),
    as on an `AsyncWorker`.

    It takes `AsyncWorker`'s keyword options (`WorkerOptions`), with the
    same meaning and defaults. A handler that
    overruns ``job_timeout`` cannot be killed (Python threads cannot be):
    its job is recorded as failed with a timeout error at once and retried
    per backoff, while the thread runs on until the function returns and
    its result is ignored. Give such handlers their own timeouts (socket,
    HTTP client, ``statement_timeout``) so that they do return.
    """

    def __init__(
        self,
        queue: Queue,
        handlers: Mapping[str, Callable[..., Any]] | None = None,
        **options: Unpack[WorkerOptions],
    ) -> None:
        if not isinstance(queue, Queue):
            raise TypeError(f"Worker needs a pgqueue.Queue, not {type(queue).__name__}")
        self.queue = queue
        for kind, fn in (handlers or {}).items():
            _refuse_coroutine(kind, fn)
        # The same table and pool, reached from worker threads. The queue's
        # tasks run too; an ``async def`` task runs on the worker's event loop.
        threaded = AsyncQueue(queue._driver.pool, **queue.core.options())
        self._worker = AsyncWorker(threaded, queue.tasks.handlers(handlers), **options)

    @property
    def name(self) -> str:
        """The name this worker records in ``locked_by``."""
        return self._worker.name

    @property
    def settings(self) -> WorkerSettings:
        return self._worker.settings

    @property
    def handlers(self) -> Handlers:
        return self._worker.handlers

    @property
    def health(self) -> HealthStamps:
        """What a health probe reads (`AsyncWorker.health`)."""
        return self._worker.health

    @health.setter
    def health(self, stamps: HealthStamps) -> None:
        self._worker.health = stamps

    def handler(self, kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the decorated plain function as the handler of ``kind``."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            _refuse_coroutine(kind, fn)
            return self._worker.handler(kind)(fn)

        return register

    def schedule(
        self,
        kind: str,
        *,
        cron: str | None = None,
        every: timedelta | None = None,
        payload: Any = None,
        name: str | None = None,
        tz: str = "UTC",
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        overlap: bool = True,
        backfill: int = 1,
    ) -> Schedule:
        """Enqueue a job of ``kind`` at each tick of ``cron`` or ``every``; call before `run`.

        As `AsyncWorker.schedule` (docs/schedules.md).
        """
        return self._worker.schedule(kind, cron=cron, every=every, payload=payload, name=name,
                                     tz=tz, queue=queue, priority=priority, overlap=overlap,
                                     backfill=backfill)  # fmt: skip

    def carry_over(self, other: Worker) -> None:
        """Take `other`'s event listeners and schedules (`AsyncWorker.carry_over`)."""
        self._worker.carry_over(other._worker)

    def add_event_listener(self, listener: L) -> L:
        """Call ``listener`` with every `JobEvent` of this worker; returns it (a decorator too).

        As `AsyncWorker.add_event_listener`: listeners run in order on the
        thread that called `run`, must be cheap, and one that raises is logged
        and never disturbs the worker.
        """
        return self._worker.add_event_listener(listener)

    def run(self, *, until_empty: bool = False) -> None:
        """Work until `stop` (or, with ``until_empty``, until nothing is ready or running)."""
        # Not waiting for a connection: start-up never depends on the database.
        self.queue.open(wait=False)
        anyio.run(functools.partial(self._worker.run, until_empty=until_empty))

    def stop(self) -> None:
        """Stop gracefully; callable from any thread or from a handler."""
        self._worker.stop()


def _refuse_coroutine(kind: str, fn: Any) -> None:
    import inspect

    # A task's handler (a copied worker's) runs on the worker's event loop.
    if inspect.iscoroutinefunction(fn) and task_of(fn) is None:
        raise TypeError(f"the handler for {kind!r} is async; use AsyncWorker for async handlers")
