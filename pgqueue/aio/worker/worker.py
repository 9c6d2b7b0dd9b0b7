"""`AsyncWorker`: claim, run, record, on asyncio or trio.

The work is done by a `Crew` of small components made new for each run
(see `pgqueue.aio.worker.crew`); this class holds what outlives a run
(settings, handlers, listeners) and the controls: `run`, `stop`, signals.
`pgqueue.Worker` (sync) runs this same worker on an event loop of its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import anyio

from ...core.events import EventListener, check_listener, listeners_from
from ...core.health import HealthStamps, Stamps
from ...core.jobs import DEFAULT_QUEUE
from ...core.schedules import Schedule, validate_schedule
from ...core.worker import Handlers, WorkerSettings
from ..queue import AsyncQueue
from .calls import QueueCalls, WorkerQueue
from .control import RunControl
from .crew import Crew

__all__ = ["AsyncWorker"]

log = logging.getLogger("pgqueue.worker")

L = TypeVar("L", bound=EventListener)


class AsyncWorker:
    """Run handlers for the jobs of an `AsyncQueue` (asyncio or trio).

        worker = pgqueue.AsyncWorker(queue, concurrency=8)

        @worker.handler("send_receipt")
        async def send_receipt(job: pgqueue.Job) -> None:
            await mailer.send(job.payload["order_id"])

        await worker.run()   # until stop(), SIGINT or SIGTERM

    ``handlers`` maps job kinds to functions; the queue's tasks
    (`AsyncQueue.task`, registered before the worker is made) are run too,
    so a worker for a queue of tasks needs none. A handler receives the
    `Job`. Returning is success (the row is deleted); raising is failure
    (retried with backoff, ``dead`` at ``max_attempts``); running longer
    than ``job_timeout`` is a failure too. ``async def``
    handlers run on the event loop; plain functions run in worker threads.
    Delivery is at least once: make handlers idempotent.

    ``batch_size`` jobs are claimed per statement; ``concurrency`` run at a
    time. The worker serves the jobs of ``queues`` (every queue when None)
    and of ``kinds`` (every kind when None), highest priority first, then
    the earliest due; a paused queue is left alone (`AsyncQueue.pause_queue`).
    ``poll_interval`` seconds is the longest an idle worker waits before it
    looks for ready jobs again, notification or not. A claimed
    job's lease is renewed every ``visibility_timeout / 4``; a job whose
    lease is older than ``visibility_timeout`` is presumed abandoned and
    returned to ``pending`` by any worker's reaper. On `stop` (or a signal)
    the worker stops claiming, hands claimed-but-unstarted jobs back at once
    (their attempt is given back), and lets running jobs finish for up to
    ``grace_period`` seconds; a job still running then is interrupted and
    returned to ``pending`` at once, its attempt counted.

    The worker's LISTEN connection is made as the queue's pool makes its
    connections, or from ``listen_conninfo`` (a pooler in front of the
    server that does not allow LISTEN: give the server's own address). The
    worker polls from its first second, whether LISTEN works or not.

    Every database call the worker makes gives up after ``call_timeout``
    seconds (a connection gone silent, a server that stopped answering) and
    is retried on another connection. After `stop` and the grace period,
    the worker writes its last outcomes for at most 10 s more; those it
    could not write come back through their lease.

    The worker holds about six times its batches' payloads in memory while
    it decodes and runs them (batches of 100 jobs of 5 MB: about 3 GB).
    ``claim_bytes`` bounds that: a claim stops at the job whose payload
    would take its batch past that many bytes (the first job always comes),
    for a small cost per claim; see docs/performance.md.

    A job cancelled while it runs (`AsyncQueue.cancel`; the worker hears
    of it at once, or within a second when its LISTEN connection is down)
    is stopped: an ``async def`` handler is cancelled, a plain one sees
    `pgqueue.job_context` ``().cancel_requested`` and may call
    ``raise_if_cancelled()``. Its row is deleted, never retried. A job
    enqueued with ``result_ttl`` keeps its handler's return value (JSON; a
    value that is not fails the job) for `AsyncQueue.result` and ``wait``.

    ``on_event`` (a callable or a sequence of them; more with
    `add_event_listener`) receives a `JobEvent` for every job claimed,
    succeeded, failed, dead, released, interrupted, reaped or cancelled, once the
    outcome is written. See `add_event_listener`.
    """

    def __init__(
        self,
        queue: AsyncQueue,
        handlers: Mapping[str, Callable[..., Any]] | None = None,
        *,
        concurrency: int = 4,
        batch_size: int = 100,
        kinds: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
        poll_interval: float | timedelta = 1.0,
        job_timeout: float | timedelta | None = None,
        visibility_timeout: timedelta = timedelta(minutes=5),
        grace_period: float | timedelta = 30.0,
        name: str | None = None,
        handle_signals: bool = True,
        on_event: EventListener | Sequence[EventListener] | None = None,
        listen_conninfo: str | None = None,
        call_timeout: float | timedelta = 60.0,
        claim_bytes: int | None = None,
    ) -> None:
        self.queue = queue
        # The queue's tasks (`AsyncQueue.task`) and the handlers given.
        self.handlers = Handlers(queue.tasks.handlers(handlers))
        self._event_listeners = listeners_from(on_event)
        self.settings = WorkerSettings.build(
            concurrency=concurrency,
            batch_size=batch_size,
            kinds=kinds,
            queues=queues,
            poll_interval=poll_interval,
            job_timeout=job_timeout,
            visibility_timeout=visibility_timeout,
            grace_period=grace_period,
            name=name,
            listen_conninfo=listen_conninfo,
            call_timeout=call_timeout,
            claim_bytes=claim_bytes,
        )
        self.handle_signals = handle_signals
        self._control = RunControl(self.settings.name)  # the current run, for stop()
        # Written by schedule() before run(); read by each run's crew.
        self._schedules: dict[str, Schedule] = {}
        # Stamped by each run, read by probes from any thread (`pgqueue.core.health`).
        self.health: HealthStamps = Stamps()

    @property
    def name(self) -> str:
        """The name this worker records in ``locked_by``."""
        return self.settings.name

    def handler(self, kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the decorated function as the handler of ``kind``."""
        return self.handlers.register(kind)

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

            worker.schedule("nightly_report", cron="0 3 * * *", tz="Europe/Berlin")
            worker.schedule("refresh_rates", every=timedelta(minutes=5), overlap=False)

        ``cron`` is a five-field expression (or ``@daily`` and the like) read
        in the time zone ``tz``; ``every`` a timedelta of a second or more,
        its ticks the multiples of it since the Unix epoch in UTC. Each tick
        enqueues exactly one job (``payload``, in ``queue`` with ``priority``,
        due at the tick), however many workers run the schedule: the tick
        and its job are written by one statement, and only the first
        worker's writes anything. ``name`` (default: the kind) identifies the
        schedule across workers and restarts; a new one starts now (earlier
        ticks are not enqueued). After downtime, at most ``backfill`` missed
        ticks are enqueued, the latest. With ``overlap=False``, a tick while
        the schedule's previous job is still pending or running is skipped.
        See docs/schedules.md.

        Bad arguments raise `TypeError` or `ValueError` here, before anything is written.
        """
        checked = validate_schedule(kind, cron=cron, every=every, payload=payload, name=name,
                                    tz=tz, queue=queue, priority=priority, overlap=overlap,
                                    backfill=backfill)  # fmt: skip
        if self._crew is not None:
            raise RuntimeError(f"worker {self.name} is running: add schedules before run()")
        if checked.name in self._schedules:
            raise ValueError(
                f"this worker has a schedule named {checked.name!r} already: "
                "give the other one a name="
            )
        self._schedules[checked.name] = checked
        return checked

    def carry_over(self, other: AsyncWorker) -> None:
        """Take `other`'s event listeners and schedules: for a copy of a
        worker with other settings (``pgqueue worker --concurrency ...``)."""
        if self._crew is not None:
            raise RuntimeError("carry_over() must be called before run()")
        self._event_listeners.extend(other._event_listeners)
        self._schedules.update(other._schedules)

    def add_event_listener(self, listener: L) -> L:
        """Call ``listener`` with every `JobEvent` of this worker; returns it (a decorator too):

            @worker.add_event_listener
            def count(event: pgqueue.JobEvent) -> None:
                outcomes[event.name] += 1

        Listeners are plain functions, called in the order they were added, on
        the worker's event loop thread, while the worker waits: keep them cheap
        (count, or put the event on a queue that another thread or task
        drains). A listener that raises is logged at ERROR with its traceback
        the first time (later errors are counted, and the count logged when
        the worker stops) and never disturbs the worker or other listeners.
        With no listener at all, the worker does no per-job work for events.
        """
        check_listener(listener)
        self._event_listeners.append(listener)
        return listener

    def stop(self) -> None:
        """Stop gracefully; callable from any thread, task or handler."""
        self._control.stop()

    @property
    def _crew(self) -> Crew | None:
        """The current run's components (None between runs)."""
        return self._control.crew

    async def run(self, *, until_empty: bool = False, handle_signals: bool | None = None) -> None:
        """Work until `stop` (or, with ``until_empty``, until no job is ready or running).

        ``handle_signals`` overrides the worker's setting for this run: False
        when the program around the worker owns SIGINT and SIGTERM (a web
        server running it in its lifespan) and calls `stop` itself.
        """
        if handle_signals is None:
            handle_signals = self.handle_signals
        # Not waiting, and no probe: a worker started during an outage
        # rides it out on its pool's retries (docs/reliability.md).
        await self.queue.open(wait=False)
        # What the run calls on the queue (`WorkerQueue`); a queue that is
        # one already (the fake of tests/unit/worker) is used as it is.
        queue = self.queue
        calls: WorkerQueue = QueueCalls(queue) if isinstance(queue, AsyncQueue) else queue
        crew = Crew(calls, self.settings, self.handlers, self._event_listeners,
                    list(self._schedules.values()), self.health)  # fmt: skip
        self._control.begin(crew)  # raises if a run is under way
        log.info(
            "worker %s starting: concurrency=%d batch_size=%d queues=%s kinds=%s",
            self.name,
            self.settings.concurrency,
            self.settings.batch_size,
            self.settings.queues or "all",
            self.settings.kinds or "all",
        )
        try:
            async with anyio.create_task_group() as tg:
                if handle_signals and threading.current_thread() is threading.main_thread():
                    tg.start_soon(self._control.on_signals, crew)
                await crew.run(until_empty=until_empty)
                tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The error of the component that failed, as the docs name it
            # (docs/errors.md: psycopg.errors.UndefinedTable before install()),
            # not the task groups the worker's components run in.
            cause = sole_cause(group)
            if cause is None:
                raise
            raise cause from None
        finally:
            self._control.end()
            log.info("worker %s stopped", self.name)


def sole_cause(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The first error of ``group`` if all its errors (cancellations aside)
    are of one type, as when several components hit the same missing table;
    else None (the group says more than any one of them)."""
    leaves: list[BaseException] = []

    def collect(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                collect(inner)
        elif not isinstance(exc, anyio.get_cancelled_exc_class()):
            leaves.append(exc)

    collect(group)
    if leaves and all(type(leaf) is type(leaves[0]) for leaf in leaves):
        return leaves[0]
    return None
