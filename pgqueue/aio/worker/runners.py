"""The runners: ``concurrency`` tasks that run handlers, each job once.

``async def`` handlers run on the event loop; plain functions in worker
threads, a few jobs per thread hop (`Chunk`: a hop costs more than a
trivial handler). Every handler is timed and bounded here, and nowhere
else; its outcome goes to the completer.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from time import perf_counter

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import TaskStatus

from ...core.jobs import Job
from ...core.ledger import Ledger
from ...core.states import Event
from ...core.worker import (
    INTERRUPTED,
    Handlers,
    MissingHandler,
    Outcome,
    WorkerSettings,
    describe_error,
)
from .chunk import Chunk
from .completer import Completer
from .flags import Broadcast, Wakeup

__all__ = ["Runners"]


@dataclass(eq=False)
class Runners:
    """Owner of the runner tasks, their thread chunks and their cancel scope.

    Moves ledger jobs from CLAIMED to RUNNING, and hands their outcomes to
    the completer. Every field below the shared ones is written here only.
    """

    settings: WorkerSettings
    handlers: Handlers
    ledger: Ledger[Outcome]
    completer: Completer
    demand: Wakeup  # the fetcher's: set once a batch at the low-water mark
    timed: bool  # run times are for listeners only
    low_water: int = field(default=0, init=False)
    _work: Broadcast = field(default_factory=Broadcast, init=False)  # jobs handed out, or closed
    _closed: bool = field(default=False, init=False)
    _asked: bool = field(default=False, init=False)  # `demand` set since the last batch
    _chunks: set[Chunk] = field(default_factory=set, init=False)  # running in threads
    _plain_kinds: dict[str, bool] = field(default_factory=dict, init=False)  # kind -> `_plain`
    _limiter: anyio.CapacityLimiter = field(init=False)
    _scope: anyio.CancelScope | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.low_water = self.settings.batch_size // 2
        self._limiter = anyio.CapacityLimiter(self.settings.concurrency)

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
        self.ledger.unhold(job.id)
        self._work.notify()

    def close(self) -> None:
        """Hand out nothing more; jobs of thread chunks not begun are released."""
        self._closed = True
        for chunk in self._chunks:
            for job in chunk.cut():
                self.completer.failed(job, "released", Event.RELEASE)
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
            job = self.ledger.next_unstarted()
            if job is None:
                await self._work.wait()
                continue
            # No checkpoint from here to _run_one: a job is always either
            # claimed (to release) or running (to record).
            if self._plain(job):
                await self._run_chunk(self._take_chunk())
                continue
            self.ledger.start_next()
            if self._check_low_water():
                # Let the fetcher send its claim before this runner goes on.
                await anyio.lowlevel.checkpoint()
            await self._run_one(job)

    def _check_low_water(self) -> bool:
        """Tell the fetcher, once a batch, when few enough jobs are left
        unstarted; True if just now."""
        if not self._asked and self.ledger.unstarted <= self.low_water:
            self._asked = True
            self.demand.set()
            return True
        return False

    def _plain(self, job: Job) -> bool:
        """A plain-function job with no timeout: it may share a thread hop with others."""
        plain = self._plain_kinds.get(job.kind)
        if plain is None:
            plain = self._plain_kinds[job.kind] = (
                self.settings.job_timeout is None
                and self.handlers.get(job.kind) is not None
                and not self.handlers.is_async(job.kind)
            )
        return plain

    def _take_chunk(self) -> Chunk:
        """The next plain jobs, begun: a fair share of the batch, so that every
        runner (thread) gets work."""
        share = max(1, self.settings.batch_size // self.settings.concurrency)
        jobs: list[Job] = []
        while len(jobs) < share:
            job = self.ledger.next_unstarted()
            if job is None or not self._plain(job):
                break
            self.ledger.start_next()
            jobs.append(job)
        self._check_low_water()
        return Chunk(jobs)

    async def _run_chunk(self, chunk: Chunk) -> None:
        """Run a chunk in one worker thread; on `close`, its jobs not begun are
        cut off and released."""
        self._chunks.add(chunk)
        try:
            # Abandoned on cancel (the grace period ran out): see `Worker`.
            await anyio.to_thread.run_sync(
                self._call_plain, chunk, abandon_on_cancel=True, limiter=self._limiter
            )
        finally:
            self._chunks.discard(chunk)
            ran, abandoned, never_begun = chunk.finish()
            for job, exc, duration in ran:
                if exc is None:
                    self.completer.succeeded(job, duration)
                else:
                    self.completer.failed(job, describe_error(exc), Event.FAIL, duration, exc)
            for job in abandoned:
                self.completer.failed(job, INTERRUPTED, Event.EXPIRE)
            for job in never_begun:
                self.completer.failed(job, "released", Event.RELEASE)

    def _call_plain(self, chunk: Chunk) -> None:
        """In a worker thread: run the chunk's handlers until it ends or is cut."""
        while (job := chunk.start_next()) is not None:
            handler = self.handlers.get(job.kind)
            assert handler is not None
            start = perf_counter() if self.timed else None
            error: Exception | None = None
            try:
                handler(job)
            except Exception as exc:
                error = exc
            chunk.ran.append((job, error, None if start is None else perf_counter() - start))

    async def _run_one(self, job: Job) -> None:
        handler = self.handlers.get(job.kind)
        timeout = self.settings.job_timeout
        start = perf_counter() if self.timed else None
        try:
            if handler is None:
                raise MissingHandler(job.kind, self.handlers.kinds())
            with anyio.fail_after(timeout) if timeout is not None else _NO_TIMEOUT:
                if self.handlers.is_async(job.kind):
                    await handler(job)
                else:
                    # Abandoned on timeout: a thread cannot be killed; see the docs.
                    await anyio.to_thread.run_sync(
                        handler, job, abandon_on_cancel=True, limiter=self._limiter
                    )
        except anyio.get_cancelled_exc_class():
            self.completer.failed(job, INTERRUPTED, Event.EXPIRE)
            raise
        except TimeoutError as exc:
            ran = _since(start, handler)
            if timeout is None:  # the handler's own
                self.completer.failed(job, describe_error(exc), Event.FAIL, ran, exc)
            else:
                text = f"TimeoutError: job_timeout of {timeout}s exceeded"
                self.completer.failed(job, text, Event.FAIL, ran)
        except Exception as exc:
            self.completer.failed(job, describe_error(exc), Event.FAIL, _since(start, handler), exc)
        else:
            self.completer.succeeded(job, None if start is None else perf_counter() - start)


_NO_TIMEOUT = nullcontext()


def _since(start: float | None, handler: object) -> float | None:
    """A handler's run time, if timed (none when there was no handler to run)."""
    return None if start is None or handler is None else perf_counter() - start
