"""`AsyncWorker`: claim, run, record — on asyncio or trio.

The cycle: a feeder claims a batch into a deque that ``concurrency``
runner tasks pull from (plain-function handlers a few at a time per
thread hop). Outcomes are buffered; each turn of the feeder is one
statement that records them (successes deleted together, failures deferred
or buried together) and claims the next batch, which it does when half of
the current one is handed out. Outcomes that no turn carries soon are
recorded by a completer. Around it: a heartbeat that keeps the leases of
claimed jobs, a reaper that returns other workers' expired jobs, a LISTEN
connection that wakes the feeder, and signal handling.

`pgqueue.Worker` (sync) runs this same worker on an event loop of its own,
with plain-function handlers in worker threads.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import timedelta
from time import perf_counter
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import psycopg
import psycopg_pool
from anyio.abc import TaskStatus

from ..core.events import (
    EventListener,
    EventName,
    JobEvent,
    check_listener,
    first_line,
    listeners_from,
)
from ..core.jobs import Job, JobStatus
from ..core.ops import Failure
from ..core.states import Event
from ..core.worker import Handlers, MissingHandler, WorkerSettings, describe_error
from .queue import AsyncQueue

__all__ = ["AsyncWorker"]

log = logging.getLogger("pgqueue.worker")

L = TypeVar("L", bound=EventListener)

# What a lost or refused database looks like; the worker waits and retries.
DATABASE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout)


INTERRUPTED = "interrupted: the worker shut down before the job finished"

# How long an outcome waits for the feeder's next claim to carry it before
# the completer records it on its own.
OUTCOME_LINGER = 0.02

# A database call still waiting after this many seconds is logged as stalled
# (a lock held on the queue table, no free connection in the pool, a slow
# server), and again when it returns.
STALL_WARNING = 5.0


# Which event a failure that left its job pending reports, by what it was decided for.
_PENDING_AGAIN = {
    Event.FAIL: EventName.FAILED,
    Event.EXPIRE: EventName.INTERRUPTED,
    Event.RELEASE: EventName.RELEASED,
}


def describe_jobs(jobs: Iterable[Job], limit: int = 20) -> str:
    """``"12 (send_receipt), 13 (send_receipt)"``: jobs for a log line, the first ``limit``."""
    listed = list(jobs)
    text = ", ".join(f"{j.id} ({j.kind})" for j in listed[:limit])
    return f"{text} and {len(listed) - limit} more" if len(listed) > limit else text


class Chunk:
    """Plain-function jobs that one worker thread runs one after another."""

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = jobs
        # (job, its error or None, seconds it ran or None when untimed)
        self.ran: list[tuple[Job, Exception | None, float | None]] = []
        self._next = 0
        self._cut = False
        self._lock = threading.Lock()

    def start_next(self) -> Job | None:
        """(In the thread.) The next job to begin, or None when done or cut."""
        with self._lock:
            if self._cut or self._next == len(self.jobs):
                return None
            self._next += 1
            return self.jobs[self._next - 1]

    def cut(self) -> list[Job]:
        """(On the event loop.) Begin no more; return the jobs never begun, once."""
        with self._lock:
            if self._cut:
                return []
            self._cut = True
            return self.jobs[self._next :]

    def finish(
        self,
    ) -> tuple[list[tuple[Job, Exception | None, float | None]], list[Job], list[Job]]:
        """(On the event loop.) Cut the chunk and split it: the jobs that ran
        (with their error and run time), the job begun but unfinished (abandoned), and the
        jobs never begun that `cut` has not handed out yet."""
        never_begun = self.cut()
        with self._lock:
            ran = list(self.ran)
            begun = self.jobs[len(ran) : self._next]
        return ran, begun, never_begun


@dataclass(eq=False, slots=True)
class _Call:
    """A database call in flight, for `AsyncWorker._watch_stalls`."""

    what: str
    since: float
    stalled: bool = False  # logged as waiting: its end is logged too


@dataclass(frozen=True, slots=True)
class Outcome:
    job: Job
    failure: Failure | None  # None: success
    cause: Event = Event.SUCCEED  # what the failure was decided for: FAIL, EXPIRE, RELEASE
    duration: float | None = None  # the handler's run time, when listeners want it


class AsyncWorker:
    """Run handlers for the jobs of an `AsyncQueue` (asyncio or trio).

        worker = pgqueue.AsyncWorker(queue, concurrency=8)

        @worker.handler("send_receipt")
        async def send_receipt(job: pgqueue.Job) -> None:
            await mailer.send(job.payload["order_id"])

        await worker.run()   # until stop(), SIGINT or SIGTERM

    A handler receives the `Job`. Returning is success (the row is deleted);
    raising is failure (retried with backoff, ``dead`` at ``max_attempts``);
    running longer than ``job_timeout`` is a failure too. ``async def``
    handlers run on the event loop; plain functions run in worker threads.
    Delivery is at least once: make handlers idempotent.

    ``batch_size`` jobs are claimed per statement; ``concurrency`` run at a
    time. ``poll_interval`` seconds is the longest an idle worker waits
    before it looks for ready jobs again, notification or not. A claimed
    job's lease is renewed every ``visibility_timeout / 4``; a job whose
    lease is older than ``visibility_timeout`` is presumed abandoned and
    returned to ``pending`` by any worker's reaper. On `stop` (or a signal)
    the worker stops claiming, hands claimed-but-unstarted jobs back at once
    (their attempt is given back), and lets running jobs finish for up to
    ``grace_period`` seconds; a job still running then is interrupted and
    returned to ``pending`` at once, its attempt counted.

    ``on_event`` (a callable or a sequence of them; more with
    `add_event_listener`) receives a `JobEvent` for every job claimed,
    succeeded, failed, dead, released, interrupted or reaped, once the
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
        poll_interval: float | timedelta = 1.0,
        job_timeout: float | timedelta | None = None,
        visibility_timeout: timedelta = timedelta(minutes=5),
        grace_period: float | timedelta = 30.0,
        name: str | None = None,
        handle_signals: bool = True,
        on_event: EventListener | Sequence[EventListener] | None = None,
    ) -> None:
        self.queue = queue
        self.handlers = Handlers(handlers)
        self._event_listeners = listeners_from(on_event)
        # id(listener) -> exceptions it raised this run; only the first is logged.
        self._event_listener_errors: dict[int, int] = {}
        self.settings = WorkerSettings.build(
            concurrency=concurrency,
            batch_size=batch_size,
            kinds=kinds,
            poll_interval=poll_interval,
            job_timeout=job_timeout,
            visibility_timeout=visibility_timeout,
            grace_period=grace_period,
            name=name,
        )
        self.handle_signals = handle_signals
        self._stopping = False
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._loop_thread: int | None = None
        self._feed_scope: anyio.CancelScope | None = None
        self._runners_scope: anyio.CancelScope | None = None
        self._wakeup = anyio.Event()
        self._outcome_ready = anyio.Event()
        self._job_done = anyio.Event()
        self._flush_lock = anyio.Lock()
        self._running: dict[int, Job] = {}
        self._unstarted: deque[Job] = deque()
        self._work_ready = anyio.Event()
        self._low_water = anyio.Event()
        self._low_water_mark = self.settings.batch_size // 2
        self._closed = False
        self._chunks: set[Chunk] = set()
        self._outcomes: list[Outcome] = []
        self._listener_stop = threading.Event()
        self._limiter = anyio.CapacityLimiter(self.settings.concurrency)
        # An orphaned job claimed, held until nothing else runs (`_run_an_orphan_alone`).
        self._held: Job | None = None
        self._next_orphan_look = 0.0
        self._in_flight: set[_Call] = set()

    @property
    def name(self) -> str:
        """The name this worker records in ``locked_by``."""
        return self.settings.name

    def handler(self, kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the decorated function as the handler of ``kind``."""
        return self.handlers.register(kind)

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

    # -- control ------------------------------------------------------------

    def stop(self) -> None:
        """Stop gracefully; callable from any thread, task or handler."""
        self._stopping = True
        if self._token is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._interrupt_feeder()
        else:
            with suppress(anyio.RunFinishedError):
                anyio.from_thread.run_sync(self._interrupt_feeder, token=self._token)

    def _interrupt_feeder(self) -> None:
        if self._feed_scope is not None:
            self._feed_scope.cancel()

    def _wake(self) -> None:
        self._wakeup.set()

    async def run(self, *, until_empty: bool = False) -> None:
        """Work until `stop` (or, with ``until_empty``, until no job is ready or running)."""
        self._token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        self._listener_stop.clear()
        log.info(
            "worker %s starting: concurrency=%d batch_size=%d kinds=%s",
            self.name,
            self.settings.concurrency,
            self.settings.batch_size,
            self.settings.kinds or "all",
        )
        try:
            async with anyio.create_task_group() as background:
                background.start_soon(self._completer)
                background.start_soon(self._heartbeat)
                background.start_soon(self._watch_stalls)
                if not until_empty:
                    await background.start(self._listener)
                    background.start_soon(self._reaper)
                if self.handle_signals and threading.current_thread() is threading.main_thread():
                    background.start_soon(self._on_signals)
                try:
                    await self._work(until_empty)
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._flush()
                    background.cancel_scope.cancel()
        finally:
            self._listener_stop.set()
            self._token = None
            # A stop() that came before run() stops that run at once; this one is spent.
            self._stopping = False
            self._report_listener_errors()
            log.info("worker %s stopped", self.name)

    # -- the cycle ----------------------------------------------------------------

    async def _work(self, until_empty: bool) -> None:
        self._closed = False
        async with anyio.create_task_group() as runners:
            self._runners_scope = runners.cancel_scope
            for _ in range(self.settings.concurrency):
                runners.start_soon(self._runner)
            try:
                await self._feed(until_empty)
            finally:
                # Stop handing out jobs, and give back those never started.
                self._closed = True
                unstarted = list(self._unstarted)
                self._unstarted.clear()
                if self._held is not None:
                    unstarted.append(self._held)
                    self._held = None
                for chunk in self._chunks:
                    for job in chunk.cut():
                        del self._running[job.id]
                        unstarted.append(job)
                self._work_ready.set()
                with anyio.CancelScope(shield=True):
                    await self._release(unstarted)
                # Running jobs get the grace period, then are interrupted.
                runners.cancel_scope.deadline = anyio.current_time() + self.settings.grace_period

    async def _feed(self, until_empty: bool) -> None:
        with anyio.CancelScope() as self._feed_scope:
            if self._stopping:
                return
            errors = 0
            while True:
                # Nothing running before the claim below, and still nothing
                # to claim after it: the queue is drained.
                quiet = not self._running and not self._unstarted
                # Armed before the claim: a notification that arrives while
                # the claim is in flight still cuts the wait after it short.
                self._wakeup = anyio.Event()
                what = "claim"
                try:
                    if not quiet and self._time_to_look_for_orphans():
                        what = "claim of an orphaned job"
                        if await self._run_an_orphan_alone():
                            errors = 0
                            continue
                        what = "claim"
                    with anyio.CancelScope(shield=True):
                        # Shielded: a claim that committed is never dropped on the floor.
                        jobs, carried = await self._settle_and_claim()
                    if not jobs:
                        # Outcomes recorded by that very statement (a failure due
                        # again at once, say) were invisible to its claim: look again.
                        idle = quiet and not carried and not self._outcomes
                        what = "claim of an orphaned job"
                        if idle and await self._run_an_orphan_alone():
                            errors = 0
                            continue
                    errors = 0
                except DATABASE_ERRORS as exc:
                    errors += 1
                    await self._pause_after_error(what, exc, errors)
                    continue
                if not jobs:
                    if until_empty and idle:
                        return
                    await self._wait_for_work(until_empty)
                    continue
                self._hand_out(jobs)
                # Claim the next batch once half of this one is handed out:
                # the database works on it while the runners finish this one.
                self._low_water = anyio.Event()
                if len(self._unstarted) > self._low_water_mark:
                    await self._low_water.wait()

    def _time_to_look_for_orphans(self) -> bool:
        """Whether a busy worker should look for an orphan now: once a reap interval."""
        now = anyio.current_time()
        if now < self._next_orphan_look:
            return False
        self._next_orphan_look = now + self.settings.reap_interval
        return True

    async def _run_an_orphan_alone(self) -> bool:
        """Claim one orphaned job (`Job.orphaned`) and run it with nothing else
        claimed or running; True if there was one.

        Its last worker vanished holding it, perhaps because of it. A batch
        that held it would go down with it again, each job there losing an
        attempt; alone, it takes nothing else with it. The batches leave
        orphans out: an idle worker looks for one after each empty claim, a
        busy one once a reap interval. A busy worker holds the orphan it
        claimed (its lease renewed) and claims nothing more until the jobs it
        has finish.
        """
        with anyio.CancelScope(shield=True), self._watched("claim of an orphaned job"):
            jobs = await self.queue.claim_orphan(worker=self.name, kinds=self.settings.kinds)
        if not jobs:
            return False
        [job] = jobs
        if self._unstarted or self._running:
            log.info("job %d (%s): its last worker vanished holding it; held until the %d jobs "
                     "this worker has are done", job.id, job.kind,
                     len(self._unstarted) + len(self._running))  # fmt: skip
        # Held (its lease renewed; given back at shutdown if the wait is cut
        # short) until nothing else runs and every outcome is recorded, even
        # those of jobs that finished while it was being claimed: if it takes
        # the process down, it must take nothing else with it.
        self._held = job
        await self._until_nothing_runs()
        with anyio.CancelScope(shield=True):
            await self._flush()
        self._held = None
        log.warning("job %d (%s): its last worker vanished holding it; running it alone",
                    job.id, job.kind)  # fmt: skip
        self._hand_out(jobs)
        await self._until_nothing_runs()
        return True

    async def _until_nothing_runs(self) -> None:
        while self._unstarted or self._running:
            self._job_done = anyio.Event()
            await self._job_done.wait()

    def _hand_out(self, jobs: list[Job]) -> None:
        """Queue claimed jobs for the runners and wake them."""
        if self._event_listeners or log.isEnabledFor(logging.DEBUG):
            self._report_claimed(jobs)
        self._unstarted.extend(jobs)
        self._work_ready.set()
        self._work_ready = anyio.Event()

    async def _wait_for_work(self, until_empty: bool) -> None:
        if until_empty:
            # Something was running: its outcome may free more work.
            self._job_done = anyio.Event()
            if self._running:
                await self._job_done.wait()
            return
        with anyio.move_on_after(self.settings.poll_interval):
            await self._wakeup.wait()

    async def _runner(self) -> None:
        while not self._closed:
            if not self._unstarted:
                await self._work_ready.wait()
                continue
            # No checkpoint from here to _run_one: a job is always either
            # unstarted (to release) or running (to record).
            job = self._unstarted.popleft()
            if self._plain(job):
                await self._run_plain_chunk(self._take_plain_chunk(job))
                continue
            self._running[job.id] = job
            try:
                if self._check_low_water():
                    # Let the feeder send its claim before this runner goes on.
                    await anyio.lowlevel.checkpoint()
                await self._run_one(job)
            finally:
                del self._running[job.id]
                self._job_done.set()

    def _check_low_water(self) -> bool:
        """Tell the feeder when few enough jobs are left unstarted; True if just now."""
        if len(self._unstarted) <= self._low_water_mark and not self._low_water.is_set():
            self._low_water.set()
            return True
        return False

    def _plain(self, job: Job) -> bool:
        """A plain-function job with no timeout: it may share a thread hop with others."""
        return (
            self.settings.job_timeout is None
            and self.handlers.get(job.kind) is not None
            and not self.handlers.is_async(job.kind)
        )

    def _take_plain_chunk(self, first: Job) -> Chunk:
        # A fair share of the batch, so that every runner (thread) gets work.
        share = max(1, self.settings.batch_size // self.settings.concurrency)
        jobs = [first]
        while self._unstarted and len(jobs) < share and self._plain(self._unstarted[0]):
            jobs.append(self._unstarted.popleft())
        self._check_low_water()
        for job in jobs:
            self._running[job.id] = job
        return Chunk(jobs)

    async def _run_plain_chunk(self, chunk: Chunk) -> None:
        """Run a few plain handlers one after another in one worker thread.

        A thread hop costs more than a trivial handler; sharing it keeps the
        sync path fast. On stop, the jobs of the chunk not begun yet are cut
        off and released with the other unstarted jobs (see `_work`).
        """
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
                    self._outcomes.append(Outcome(job, None, Event.SUCCEED, duration))
                else:
                    self._record(job, describe_error(exc), Event.FAIL, duration, exc)
            for job in abandoned:
                self._record(job, INTERRUPTED, Event.EXPIRE)
            for job in never_begun:
                self._record(job, "released", Event.RELEASE)
            self._outcome_ready.set()
            for job in chunk.jobs:
                self._running.pop(job.id, None)
            self._job_done.set()

    def _call_plain(self, chunk: Chunk) -> None:
        """In a worker thread: run the chunk's handlers until it ends or is cut."""
        timed = bool(self._event_listeners)  # run times are for listeners only
        while (job := chunk.start_next()) is not None:
            handler = self.handlers.get(job.kind)
            assert handler is not None
            start = perf_counter() if timed else None
            error: Exception | None = None
            try:
                handler(job)
            except Exception as exc:
                error = exc
            chunk.ran.append((job, error, None if start is None else perf_counter() - start))

    async def _run_one(self, job: Job) -> None:
        handler = self.handlers.get(job.kind)
        timeout = self.settings.job_timeout
        start = perf_counter() if self._event_listeners else None  # run times are for listeners
        try:
            if handler is None:
                raise MissingHandler(job.kind, self.handlers.kinds())
            with anyio.fail_after(timeout) if timeout is not None else nullcontext():
                if self.handlers.is_async(job.kind):
                    await handler(job)
                else:
                    # Abandoned on timeout: a thread cannot be killed; see the docs.
                    await anyio.to_thread.run_sync(
                        handler, job, abandon_on_cancel=True, limiter=self._limiter
                    )
        except anyio.get_cancelled_exc_class():
            self._record(job, INTERRUPTED, Event.EXPIRE)
            raise
        except TimeoutError as exc:
            ran = None if start is None else perf_counter() - start
            if timeout is None:  # the handler's own
                self._record(job, describe_error(exc), Event.FAIL, ran, exc)
            else:
                text = f"TimeoutError: job_timeout of {timeout}s exceeded"
                self._record(job, text, Event.FAIL, ran)
        except Exception as exc:
            ran = None if start is None or handler is None else perf_counter() - start
            self._record(job, describe_error(exc), Event.FAIL, ran, exc)
        else:
            ran = None if start is None else perf_counter() - start
            self._outcomes.append(Outcome(job, None, Event.SUCCEED, ran))
            self._outcome_ready.set()

    def _record(
        self,
        job: Job,
        error: str,
        event: Event,
        duration: float | None = None,
        exc: BaseException | None = None,
    ) -> None:
        """Decide what a failed, interrupted or released job becomes, log it, and
        queue the outcome for writing."""
        failure = self.queue.core.failure(job, error, event=event)
        self._log_failure(job, failure, event, exc)
        self._outcomes.append(Outcome(job, failure, event, duration))
        self._outcome_ready.set()

    def _log_failure(
        self, job: Job, failure: Failure, event: Event, exc: BaseException | None
    ) -> None:
        # Logged when decided, with the exception at hand; a listener hears of
        # it once written (see `_report_outcomes`).
        tries = f"{job.attempts} of {job.max_attempts}"
        if event is Event.RELEASE:
            log.debug("job %d (%s) released unstarted", job.id, job.kind)
        elif event is Event.EXPIRE:
            if failure.status is JobStatus.DEAD:
                message = "job %d (%s) interrupted at shutdown on its last attempt (%s): now dead"
                log.error(message, job.id, job.kind, tries)
            else:
                message = "job %d (%s) interrupted at shutdown (attempt %s): back to pending"
                log.warning(message, job.id, job.kind, tries)
        elif failure.status is JobStatus.DEAD:
            message = "job %d (%s) failed on its last attempt (%s), now dead: %s"
            log.error(message, job.id, job.kind, tries, first_line(failure.error), exc_info=exc)
        else:
            message = "job %d (%s) failed (attempt %s), retrying in %.1fs: %s"
            delay = failure.delay.total_seconds()
            log.warning(message, job.id, job.kind, tries, delay, first_line(failure.error))

    async def _completer(self) -> None:
        # Outcomes normally ride along with the feeder's next claim (one
        # transaction for both). Those the feeder has not taken a moment
        # after they arrived (its runners are busy with slow jobs, say) are
        # recorded here, all that have gathered in one go.
        while True:
            await self._outcome_ready.wait()
            await anyio.sleep(OUTCOME_LINGER)
            self._outcome_ready = anyio.Event()
            await self._flush()

    async def _settle_and_claim(self) -> tuple[list[Job], int]:
        """Record every outcome waiting and claim the next batch, together;
        return the jobs claimed and how many outcomes were recorded."""
        async with self._flush_lock:
            with self._watched("claim"):
                return await self._write_outcomes(claim=True)

    async def _flush(self) -> None:
        async with self._flush_lock:
            errors = 0
            while self._outcomes:
                try:
                    with self._watched("recording outcomes"):
                        await self._write_outcomes(claim=False)
                except DATABASE_ERRORS as exc:
                    errors += 1
                    await self._pause_after_error("recording outcomes", exc, errors)

    async def _write_outcomes(self, *, claim: bool) -> tuple[list[Job], int]:
        """(Under the flush lock.) Write every outcome waiting, and claim the
        next batch if asked, in one statement. On an error the outcomes go
        back to wait for the next try."""
        batch, self._outcomes = self._outcomes, []
        succeeded = [o.job.id for o in batch if o.failure is None]
        failures = [o.failure for o in batch if o.failure is not None]
        claimed: list[Job] = []
        try:
            if claim:
                turn = await self.queue.cycle(
                    succeeded,
                    failures,
                    worker=self.name,
                    limit=self.settings.batch_size,
                    kinds=self.settings.kinds,
                )
                done, written, claimed = turn.completed, turn.failed, turn.claimed
            else:
                done, written = await self.queue.settle(succeeded, failures, worker=self.name)
        except BaseException:
            self._outcomes[:0] = batch
            raise
        lost = len(batch) - len(done) - len(written)
        if lost:
            recorded = {*done, *written}
            log.warning(
                "worker %s: %d outcomes not recorded, those jobs' leases had expired: %s",
                self.name,
                lost,
                describe_jobs(o.job for o in batch if o.job.id not in recorded),
            )
        if self._event_listeners or log.isEnabledFor(logging.DEBUG):
            self._report_outcomes(batch, done, written)
        return claimed, len(batch)

    def _report_outcomes(
        self, batch: list[Outcome], done: list[int], written: dict[int, JobStatus]
    ) -> None:
        """Log (at DEBUG) and tell the listeners what a statement wrote."""
        deleted = set(done)
        debug = log.isEnabledFor(logging.DEBUG)
        for outcome in batch:
            job, failure = outcome.job, outcome.failure
            if failure is None:
                if job.id not in deleted:
                    continue
                name, attempts, error = EventName.SUCCEEDED, job.attempts, None
            else:
                status = written.get(job.id)
                if status is None:
                    continue
                dead = status is JobStatus.DEAD
                name = EventName.DEAD if dead else _PENDING_AGAIN[outcome.cause]
                attempts, error = failure.new_attempts, first_line(failure.error)
            if debug:
                log.debug("job %d (%s) recorded as %s", job.id, job.kind, name)
            if self._event_listeners:
                self._emit(
                    JobEvent(
                        name,
                        job.id,
                        job.kind,
                        self.name,
                        self.queue.table,
                        attempts=attempts,
                        duration=outcome.duration,
                        error=error,
                    )
                )

    def _report_claimed(self, jobs: list[Job]) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("worker %s claimed %d jobs", self.name, len(jobs))
            for job in jobs:
                log.debug("job %d (%s) claimed (attempt %d of %d)",
                          job.id, job.kind, job.attempts, job.max_attempts)  # fmt: skip
        if self._event_listeners:
            for job in jobs:
                self._emit(JobEvent(EventName.CLAIMED, job.id, job.kind, self.name,
                                    self.queue.table, job.attempts))  # fmt: skip

    def _emit(self, event: JobEvent) -> None:
        """Call every listener with ``event``; one that raises is logged, never propagated."""
        for listener in self._event_listeners:
            try:
                listener(event)
            except Exception:
                errors = self._event_listener_errors.get(id(listener), 0)
                self._event_listener_errors[id(listener)] = errors + 1
                if not errors:
                    log.exception(
                        "worker %s: event listener %r raised on %s of job %d (%s); "
                        "its further errors are counted, not logged",
                        self.name, listener, event.name, event.job_id, event.kind,
                    )  # fmt: skip

    def _report_listener_errors(self) -> None:
        for listener in self._event_listeners:
            errors = self._event_listener_errors.pop(id(listener), 0)
            if errors > 1:
                log.error("worker %s: event listener %r raised %d times in this run",
                          self.name, listener, errors)  # fmt: skip
        self._event_listener_errors.clear()

    async def _release(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        outcomes = [
            Outcome(j, self.queue.core.failure(j, "released", event=Event.RELEASE), Event.RELEASE)
            for j in jobs
        ]
        try:
            _, written = await self.queue.settle(
                [], [o.failure for o in outcomes if o.failure], worker=self.name
            )
        except DATABASE_ERRORS as exc:
            log.warning("worker %s could not release %d unstarted jobs (%s), the reaper will: %s",
                        self.name, len(jobs), exc, describe_jobs(jobs))  # fmt: skip
            return
        log.info("worker %s released %d unstarted jobs: %s", self.name, len(written),
                 describe_jobs(j for j in jobs if j.id in written))  # fmt: skip
        if self._event_listeners or log.isEnabledFor(logging.DEBUG):
            self._report_outcomes(outcomes, [], written)

    async def _pause_after_error(self, what: str, exc: BaseException, errors: int) -> None:
        delay = min(0.1 * 2**errors, 10.0) * (0.5 + random.random() / 2)
        log.warning("worker %s: %s failed (%s); retrying in %.1fs", self.name, what, exc, delay)
        await anyio.sleep(delay)

    @contextmanager
    def _watched(self, what: str) -> Iterator[None]:
        """Time a database call for `_watch_stalls`; after a stall, log its end."""
        call = _Call(what, anyio.current_time())
        self._in_flight.add(call)
        ended = "failed"
        try:
            yield
            ended = "returned"
        finally:
            self._in_flight.discard(call)
            if call.stalled:
                log.warning("worker %s: %s %s after %.1fs", self.name, what, ended,
                            anyio.current_time() - call.since)  # fmt: skip

    async def _watch_stalls(self) -> None:
        """Log each database call that has waited `STALL_WARNING` seconds, once.

        A statement blocked on a lock, or a task waiting for a connection of
        an exhausted pool, raises nothing: without this line the worker
        would just fall silent.
        """
        while True:
            await anyio.sleep(STALL_WARNING / 5)
            now = anyio.current_time()
            for call in list(self._in_flight):
                if not call.stalled and now - call.since >= STALL_WARNING:
                    call.stalled = True
                    log.warning(
                        "worker %s: %s waiting on the database for %.0fs so far: a lock held "
                        "on %s, no free connection in the pool, or a slow server "
                        "(pg_stat_activity and pg_locks show which)",
                        self.name, call.what, now - call.since, self.queue.table,
                    )  # fmt: skip

    # -- around the cycle -------------------------------------------------------------

    async def _heartbeat(self) -> None:
        while True:
            await anyio.sleep(self.settings.heartbeat_interval)
            ids = [*self._running, *(j.id for j in self._unstarted)]
            if self._held is not None:
                ids.append(self._held.id)
            if not ids:
                continue
            try:
                with self._watched("heartbeat"):
                    await self.queue.heartbeat(ids, worker=self.name)
            except DATABASE_ERRORS as exc:
                log.warning("worker %s: heartbeat failed (%s)", self.name, exc)

    async def _reaper(self) -> None:
        interval = self.settings.reap_interval
        while True:
            try:
                # What each job became, for the log and the listeners; `reap` tells only pending.
                with self._watched("reaper"):
                    written = await self.queue.reap_outcomes(self.settings.visibility_timeout)
            except DATABASE_ERRORS as exc:
                log.warning("worker %s: reaper failed (%s)", self.name, exc)
            else:
                if written:
                    self._report_reaped(written)
            await anyio.sleep(interval * (0.8 + random.random() * 0.4))

    def _report_reaped(self, written: dict[int, JobStatus]) -> None:
        reaped = [i for i, status in written.items() if status is JobStatus.PENDING]
        buried = [i for i, status in written.items() if status is JobStatus.DEAD]
        if reaped:
            log.warning("worker %s reaped %d jobs whose lease had expired, back to pending: %s",
                        self.name, len(reaped), ", ".join(map(str, reaped)))  # fmt: skip
            self._wake()
        if buried:
            log.error("worker %s buried %d jobs whose lease expired on their last attempt: %s",
                      self.name, len(buried), ", ".join(map(str, buried)))  # fmt: skip
        if self._event_listeners:
            for job_id, status in written.items():
                name = EventName.DEAD if status is JobStatus.DEAD else EventName.REAPED
                self._emit(JobEvent(name, job_id, None, self.name, self.queue.table))

    async def _listener(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """LISTEN on a connection of its own, in a thread; reconnect with backoff.

        A thread rather than psycopg's async notifies() so that one listener
        serves asyncio and trio alike.
        """
        token = anyio.lowlevel.current_token()
        errors = 0
        while True:
            listening = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._announce_listening, listening, task_status)
                try:
                    await anyio.to_thread.run_sync(
                        self._listen_blocking, token, listening, abandon_on_cancel=True
                    )
                except Exception as exc:
                    log.warning("worker %s: listener lost (%s); polling meanwhile", self.name, exc)
                tg.cancel_scope.cancel()
            if not listening.is_set():
                errors += 1
            else:
                errors = 0
            # Only the first start reports to the caller; later ones report to nobody.
            task_status = anyio.TASK_STATUS_IGNORED
            await anyio.sleep(min(0.2 * 2**errors, 15.0))

    async def _announce_listening(
        self, listening: anyio.Event, task_status: TaskStatus[None]
    ) -> None:
        with anyio.move_on_after(self.settings.poll_interval):
            await listening.wait()
            # A notification sent while (re)connecting is lost: look now.
            self._wake()
        task_status.started()

    def _listen_blocking(
        self, token: anyio.lowlevel.EventLoopToken, listening: anyio.Event
    ) -> None:
        with psycopg.connect(self.queue.conninfo, autocommit=True) as conn:
            conn.execute(self.queue.core.sql.listen)
            anyio.from_thread.run_sync(listening.set, token=token)
            while not self._listener_stop.is_set():
                for _ in conn.notifies(timeout=0.5, stop_after=1):
                    anyio.from_thread.run_sync(self._wake, token=token)

    async def _on_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if self._stopping:
                    log.warning(
                        "worker %s: %s again, not waiting for running jobs", self.name, name
                    )
                    if self._runners_scope is not None:
                        self._runners_scope.cancel()
                else:
                    log.info("worker %s: %s, stopping gracefully", self.name, name)
                self.stop()
