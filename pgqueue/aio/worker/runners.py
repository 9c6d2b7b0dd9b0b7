"""The runners: ``concurrency`` tasks that run handlers, each job once.

A runner takes the next claimed job, whatever it is: ``async def``
handlers run on the event loop, plain functions in worker threads, a few
jobs to a thread hop (`pgqueue.aio.worker.threads`). A runner that finds
no claimed job takes the not-yet-begun tail of another runner's chunk
that waits behind a run (or waits until one is worth taking), so
``concurrency`` handlers run whenever that many jobs are ready. Every
handler is timed and bounded here, and nowhere else; its outcome (with
its return value as JSON, for a job that keeps one) goes to the completer.

Each run has a `JobContext` (`pgqueue.job_context()`), set around the
handler: in the runner task for an async handler, in the thread, job by
job, for a plain one; and so has its span, when tracing is on
(`pgqueue.core.tracing`): current there too, so that the handler's own
spans are its children. A cancel (`cancel`, from the notifier or the lease
keeper) stops an async handler through its runner's cancel scope, sets a
plain handler's ``cancel_requested`` (it stops if it looks), and keeps a
job not begun yet from ever starting.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from time import perf_counter

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import TaskStatus

from ...core import tracing
from ...core.context import CURRENT, JobContext
from ...core.jobs import Job
from ...core.ledger import Ledger, Phase
from ...core.results import encode_result
from ...core.states import Event
from ...core.worker import (
    CANCELLED,
    CANCELLED_UNSTARTED,
    INTERRUPTED,
    Handlers,
    MissingHandler,
    Outcome,
    Pace,
    WorkerSettings,
)
from .completer import Completer
from .flags import Broadcast, Wakeup
from .threads import Threads, call_plain, log_cancel_asked

__all__ = ["Runners"]

log = logging.getLogger("pgqueue.worker")


# A job a runner has begun alone (not in a chunk), until its outcome goes to
# the completer: its context, and its runner's scope for an async handler.
# A tuple: one is made per job.
_Run = tuple[JobContext, anyio.CancelScope | None]


@dataclass(eq=False)
class Runners:
    """Owner of the runner tasks, their cancel scope and the jobs they run alone.

    Moves ledger jobs from CLAIMED to RUNNING (itself, or through `Threads`
    for chunks), and hands their outcomes to the completer. Every field
    below the shared ones is written here only.
    """

    settings: WorkerSettings
    handlers: Handlers
    ledger: Ledger[Outcome]
    completer: Completer
    demand: Wakeup  # the fetcher's: set at the low-water mark, and by a runner with nothing to do
    pace: Pace  # the fetcher's: where the low-water mark is
    table: str = ""  # the queue's, for the spans of runs
    _work: Broadcast = field(default_factory=Broadcast, init=False)  # jobs handed out, or closed
    _closed: bool = field(default=False, init=False)
    _asked: bool = field(default=False, init=False)  # `demand` set since the last batch
    _limiter: anyio.CapacityLimiter = field(init=False)
    _threads: Threads = field(init=False)  # the chunks of plain jobs
    _scope: anyio.CancelScope | None = field(default=None, init=False)
    _idle: int = field(default=0, init=False)  # runners waiting for work (or a chunk's tail)
    # Every job begun alone here whose outcome has not gone to the completer
    # yet: written by the runners, read by `cancel` (both on the event loop).
    _runs: dict[int, _Run] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._limiter = anyio.CapacityLimiter(self.settings.concurrency)
        self._threads = Threads(self.settings, self.handlers, self.ledger, self.completer,
                                self._limiter, self.table)  # fmt: skip

    def hand_out(self, jobs: list[Job]) -> None:
        """(Fetcher.) Claimed jobs for the runners, in claim order."""
        self.ledger.claim(jobs)
        self._asked = False
        self._work.notify()

    def hold(self, job: Job) -> None:
        """(Fetcher.) A claimed orphan, kept from the runners until `unhold`."""
        self.ledger.claim([job])
        self.ledger.hold(job.id)

    def unhold(self, job: Job) -> None:
        """(Fetcher.) A held orphan's turn; nothing if it was cancelled meanwhile."""
        if self.ledger.phase(job.id) is Phase.HELD:
            self.ledger.unhold(job.id)
            self._work.notify()

    def cancel(self, job_ids: Iterable[int]) -> None:
        """(Notifier, lease keeper; on the event loop.) Stop these jobs: their
        cancel was requested. An async handler is cancelled (its runner's
        scope); a plain one sees ``cancel_requested`` and stops if it looks;
        a job not begun never starts. Jobs not held here, or whose outcome is
        decided already, are left alone; a second request changes nothing."""
        for job_id in job_ids:
            phase = self.ledger.phase(job_id)
            if phase is Phase.CLAIMED or phase is Phase.HELD:
                job = self.completer.cancel_unstarted(job_id)
                log.info("job %d (%s) cancelled before it started", job_id, job.kind)
                continue
            run = self._runs.get(job_id)
            if run is None:
                self._threads.cancel(job_id)
                continue
            context, lane = run
            if not context.request_cancel():
                continue
            if lane is not None:
                log.info("job %d (%s): cancel requested; cancelling its handler", job_id,
                         context.job.kind)  # fmt: skip
                lane.cancel()
            else:
                log_cancel_asked(context.job)

    def close(self) -> None:
        """Hand out nothing more; jobs of thread chunks not begun are released."""
        self._closed = True
        self._threads.close()
        self._work.notify()

    def interrupt_after(self, seconds: float) -> None:
        """Cancel running async handlers after ``seconds`` (the grace period)."""
        if self._scope is not None:
            self._scope.deadline = anyio.current_time() + seconds

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run jobs until `close`, then until those running are done or interrupted."""
        async with anyio.create_task_group() as runners:
            self._scope = runners.cancel_scope
            for _ in range(self.settings.concurrency):
                runners.start_soon(self._runner)
            task_status.started()

    async def _runner(self) -> None:
        while not self._closed:
            # The runner's lane: `cancel` cancels it to stop the async handler
            # running in it, and the runner goes on in a new one. One scope
            # per job would cost more than a trivial job.
            with anyio.CancelScope() as lane:
                await self._run_in(lane)

    async def _run_in(self, lane: anyio.CancelScope) -> None:
        """Run jobs until `close`, or until ``lane`` is cancelled (a job's cancel)."""
        threads = self._threads
        while not self._closed:
            job = self.ledger.next_unstarted()
            if job is None:
                self.demand.set()  # a runner is free: the fetcher may claim for it
                # Nothing claimed waits: the tail of a chunk may, now or soon.
                chunk, retry_in = threads.steal(self._idle + 1)
                if chunk is not None:
                    await threads.run(chunk)
                    continue
                self._idle += 1
                try:
                    if retry_in is None:
                        await self._work.wait()
                    else:
                        with anyio.move_on_after(retry_in):
                            await self._work.wait()
                finally:
                    self._idle -= 1
                continue
            # No checkpoint from here to _run_one: a job is always either
            # claimed (to release) or running (to record).
            if threads.takes(job.kind):
                chunk = threads.take()
                self._check_low_water()
                await threads.run(chunk)
                continue
            self.ledger.start_next()
            if await self._run_one(job, lane, yield_first=self._check_low_water()):
                return  # its lane was cancelled for it (and the handler returned)

    def _check_low_water(self) -> bool:
        """Tell the fetcher, once a batch, when few enough jobs are left
        unstarted; True if just now."""
        if not self._asked and self.ledger.unstarted <= self.pace.low_water():
            self._asked = True
            self.demand.set()
            return True
        return False

    async def _run_one(self, job: Job, lane: anyio.CancelScope, *, yield_first: bool) -> bool:
        """Run one job in ``lane``; True if `cancel` cancelled the lane for it."""
        handler = self.handlers.get(job.kind)
        timeout = self.settings.job_timeout
        is_async = handler is not None and self.handlers.is_async(job.kind)
        context = JobContext(job, self.settings.name)
        self._runs[job.id] = (context, lane if is_async else None)
        token = CURRENT.set(context)
        start: float | None = None
        result: str | None = None
        began = False
        try:
            if yield_first:
                # Let the fetcher send its claim before this runner goes on.
                await anyio.lowlevel.checkpoint()
                if context.cancel_requested:  # meanwhile (a plain handler's): never start it
                    self.completer.failed(job, CANCELLED_UNSTARTED, Event.CANCEL)
                    return False
            began = True
            start = perf_counter()
            if handler is None:
                raise MissingHandler(job.kind, self.handlers.kinds())
            with anyio.fail_after(timeout) if timeout is not None else _NO_TIMEOUT:
                if is_async:
                    tracer = tracing.tracer
                    if tracer is None:
                        value = await handler(job)
                    else:
                        with tracer.run(self.table, job, context.worker):
                            value = await handler(job)
                    if job.result_ttl is not None:
                        result = encode_result(value, job.kind)
                else:
                    # Abandoned on timeout: a thread cannot be killed; see the docs.
                    _, exc, result, _ = await anyio.to_thread.run_sync(
                        call_plain, handler, context, self.table,
                        abandon_on_cancel=True, limiter=self._limiter,
                    )  # fmt: skip
                    if exc is not None:
                        raise exc
        except anyio.get_cancelled_exc_class():
            assert self._scope is not None
            if context.cancel_requested and not self._scope.cancel_called:
                # Its lane was cancelled for it, not the runners at shutdown.
                text = CANCELLED if began else CANCELLED_UNSTARTED
                self.completer.failed(job, text, Event.CANCEL, _since(start, handler))
            else:
                self.completer.failed(job, INTERRUPTED, Event.EXPIRE)
            raise
        except TimeoutError as exc:
            ran = _since(start, handler)
            if timeout is None or context.cancel_requested:  # the handler's own
                self.completer.raised(context, exc, ran)
            else:
                text = f"TimeoutError: job_timeout of {timeout}s exceeded"
                self.completer.failed(job, text, Event.FAIL, ran)
        except Exception as exc:
            self.completer.raised(context, exc, _since(start, handler))
        else:
            self.completer.succeeded(job, perf_counter() - start, result)
        finally:
            del self._runs[job.id]
            CURRENT.reset(token)
        # Its cancel cancels the lane of an async handler, and only then.
        return is_async and context.cancel_requested


_NO_TIMEOUT = nullcontext()


def _since(start: float | None, handler: object) -> float | None:
    """A handler's run time (none when there was no handler to run)."""
    return None if start is None or handler is None else perf_counter() - start
