"""The completer: the only writer of outcomes.

Runners hand it each job's outcome (`add`). A claim carries every outcome
waiting (`turn`: one statement records them and claims the next batch);
outcomes no claim carried within `OUTCOME_LINGER` are written by `run`, on
a connection of their own, beside the claims. At shutdown `flush` writes
what is left, within a bound: the rest comes back through the lease.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

import anyio

from ...core.context import JobContext
from ...core.heads import NO_HEADS, ClaimHeads
from ...core.jobs import Job, JobStatus
from ...core.ledger import Ledger, Phase
from ...core.ops import Failure, WorkerClaim
from ...core.states import Event
from ...core.worker import (
    CANCELLED,
    CANCELLED_UNSTARTED,
    OUTCOME_LINGER,
    RETRY_BACKOFF,
    SUCCESS,
    Outcome,
    describe_error,
    describe_jobs,
)
from .calls import DATABASE_ERRORS, Calls, WorkerQueue
from .flags import Broadcast, Wakeup
from .reporter import Reporter

__all__ = ["Completer"]

log = logging.getLogger("pgqueue.worker")

_WRITING = (Phase.DONE, Phase.WRITING)


@dataclass(eq=False)
class Completer:
    """Owner of every write of an outcome (the ledger's DONE -> WRITING ->
    RECORDED moves, and the RELEASE of jobs given back or cancelled unstarted)."""

    queue: WorkerQueue
    calls: Calls
    ledger: Ledger[Outcome]
    reporter: Reporter
    progress: Broadcast  # notified here when outcomes are recorded (or go back to wait)
    worker: str
    # Called when an outcome that frees a limit's slot is decided, and again
    # once it is written (the crew wires it to `Fetcher.slot_freed`).
    slot_freed: Callable[[], None] = field(default=lambda: None)
    # Told every handler's run time (the crew wires it to the fetcher's `Pace`).
    ran: Callable[[float], None] = field(default=lambda seconds: None)
    _ready: Wakeup = field(default_factory=Wakeup, init=False)  # set by `_add`, waited on by `run`
    _takes: int = field(default=0, init=False)  # statements that took outcomes (`run` reads it)
    # The last flush's scope while it runs, and the latest it may end (set by
    # `cut_flush_after`, a second signal): both written here only.
    _flushing: anyio.CancelScope | None = field(default=None, init=False)
    _flush_by: float = field(default=math.inf, init=False)

    # -- what runners call -------------------------------------------------------

    def succeeded(self, job: Job, duration: float | None = None, result: str | None = None) -> None:
        """The handler returned; ``result`` is its return value as JSON, for a
        job with ``result_ttl``."""
        if duration is not None:
            self.ran(duration)
            if not self.reporter.wanted:
                duration = None  # the outcome carries it for listeners only
        if duration is None and result is None:
            self._add(job, SUCCESS)
        else:
            self._add(job, Outcome(None, Event.SUCCEED, duration, result))

    def failed(
        self,
        job: Job,
        error: str,
        event: Event = Event.FAIL,
        duration: float | None = None,
        exc: BaseException | None = None,
    ) -> None:
        """Decide what a failed, interrupted, cancelled or released job
        becomes, log it, and queue the outcome for writing."""
        if duration is not None:
            self.ran(duration)
        self._add(job, self._decide(job, error, event, duration, exc))

    def raised(self, context: JobContext, exc: Exception, duration: float | None) -> None:
        """A handler raised: once its cancel was requested, whatever it raised
        ends the job as cancelled."""
        if context.cancel_requested:
            text = f"{CANCELLED}; {describe_error(exc)}"
            self.failed(context.job, text, Event.CANCEL, duration, exc)
        else:
            self.failed(context.job, describe_error(exc), Event.FAIL, duration, exc)

    def _decide(
        self,
        job: Job,
        error: str,
        event: Event,
        duration: float | None = None,
        exc: BaseException | None = None,
    ) -> Outcome:
        failure = self.queue.decide(job, error, event=event)
        if event is not Event.RELEASE:
            self.reporter.decided(job, failure, event, exc)
        return Outcome(failure, event, duration)

    def cancel_unstarted(self, job_id: int) -> Job:
        """A claimed or held job no runner began was cancelled: it never
        starts, and its outcome is queued for writing."""
        job = self.ledger.release(
            job_id, lambda job: self._decide(job, CANCELLED_UNSTARTED, Event.CANCEL)
        )
        self._ready.set()
        self.progress.notify()
        return job

    def _add(self, job: Job, outcome: Outcome) -> None:
        if self.ledger.finish(job.id, outcome):
            self._ready.set()
            if job.limit_key is not None:
                self.slot_freed()
        else:
            log.warning("job %d (%s) finished after its lease was lost; its outcome is not "
                        "written (another worker may run it again)", job.id, job.kind)  # fmt: skip
        self.progress.notify()

    def release(self, job: Job) -> Outcome:
        """The outcome of a job given back unstarted (its attempt given back too)."""
        return Outcome(self.queue.decide(job, "released", event=Event.RELEASE), Event.RELEASE)

    async def new_to_this_worker(self, jobs: list[Job]) -> list[Job]:
        """(Fetcher.) The claimed jobs this worker does not hold already. One it
        still runs came back to it through its own reaper (its lease expired
        while the event loop was blocked, say): that run's outcome will not be
        written, and this claim is given back at once. One whose outcome is on
        its way is handed out once that is recorded (this is its next attempt)."""
        ledger = self.ledger
        again = ledger.held(jobs)  # almost always none: one pass over the batch
        while any(ledger.phase(job.id) in _WRITING for job in again):
            await self.progress.wait()
            again = ledger.held(again)
        if not again:
            return jobs
        log.warning("worker %s claimed again %d jobs it was still running (their lease had "
                    "expired); given back: %s", self.worker, len(again),
                    describe_jobs(again))  # fmt: skip
        given_back = {job.id for job in again}
        self.ledger.lose(given_back)
        releases = [f for job in again if (f := self.release(job).failure) is not None]
        with suppress(*DATABASE_ERRORS):  # else they come back through the lease
            await self.calls("releasing jobs claimed again", self.queue.settle, [],
                             releases, worker=self.worker)  # fmt: skip
        return [job for job in jobs if job.id not in given_back]

    def release_unstarted(self) -> None:
        """(Shutdown.) Every claimed job no runner began becomes a release to write."""
        if self.ledger.release_unstarted(self.release):
            self._ready.set()

    # -- writing ------------------------------------------------------------------

    async def turn(
        self, claim: WorkerClaim, limit: int, heads: ClaimHeads = NO_HEADS
    ) -> tuple[list[Job], int, float | None, int]:
        """Write every outcome waiting and claim up to ``limit`` jobs as
        ``claim`` says, in one statement, starting from ``heads``; return the
        jobs claimed, how many outcomes it carried, `Turn.token_in` and
        `Turn.walked`."""
        batch = self._take()
        succeeded, failures, results = _split(batch)
        plain = not any(job.limit_key or job.result_ttl for job, o in batch if o.failure is None)
        try:
            turn = await self.calls("claim", self.queue.turn, succeeded, failures, claim,
                                    limit, results=results, plain=plain,
                                    heads=heads)  # fmt: skip
        except BaseException:
            self.ledger.unwrite(job.id for job, _ in batch)
            self.progress.notify()
            raise
        self._recorded(batch, turn.completed, turn.failed, turn.slots_left_free > 0)
        return turn.claimed, len(batch), turn.token_in, turn.walked

    async def write(self) -> None:
        """Write every outcome waiting, in one statement."""
        batch = self._take()
        if not batch:
            return
        succeeded, failures, results = _split(batch)
        try:
            done, written = await self.calls("recording outcomes", self.queue.settle, succeeded,
                                             failures, worker=self.worker,
                                             results=results)  # fmt: skip
        except BaseException:
            self.ledger.unwrite(job.id for job, _ in batch)
            self.progress.notify()
            raise
        self._recorded(batch, done, written, any(job.limit_key is not None for job, _ in batch))

    def _take(self) -> list[tuple[Job, Outcome]]:
        batch = self.ledger.take_done()
        if batch:
            self._takes += 1
        return batch

    def _recorded(
        self,
        batch: list[tuple[Job, Outcome]],
        done: list[int],
        written: dict[int, JobStatus],
        slots_freed: bool,
    ) -> None:
        """The batch is written; ``slots_freed``: it left limit slots free."""
        if not batch:
            return
        # Outcomes the database refused (their lease had expired) are over too.
        self.ledger.recorded(job.id for job, _ in batch)
        self.reporter.written(batch, done, written)
        self.progress.notify()
        # The statement that freed a slot could not see it free: a claim can now.
        if slots_freed:
            self.slot_freed()

    async def run(self) -> None:
        """Write the outcomes that no claim carried within `OUTCOME_LINGER`."""
        while True:
            await self._ready.wait()
            while True:
                takes = self._takes
                await anyio.sleep(OUTCOME_LINGER)
                if not self.ledger.count(Phase.DONE):
                    break
                if takes == self._takes:  # no claim took any meanwhile
                    await self._write_until_done("recording outcomes")
                    break

    async def _write_until_done(self, what: str) -> None:
        errors = 0
        while self.ledger.count(Phase.DONE):
            try:
                await self.write()
                errors = 0
            except DATABASE_ERRORS as exc:
                errors += 1
                delay = RETRY_BACKOFF.delay(errors).total_seconds()
                self.reporter.retrying(what, exc, delay)
                await anyio.sleep(delay)

    def cut_flush_after(self, seconds: float) -> None:
        """(Abort.) The last outcomes get at most ``seconds`` more, from now,
        whether their flush runs already or not yet."""
        self._flush_by = anyio.current_time() + seconds
        if self._flushing is not None:
            self._flushing.deadline = min(self._flushing.deadline, self._flush_by)

    async def flush(self, deadline: float) -> None:
        """(Shutdown, shielded.) Write every outcome left, giving up after
        ``deadline`` seconds (or sooner, `cut_flush_after`): those jobs come
        back through their lease."""
        started = anyio.current_time()
        with anyio.CancelScope(deadline=min(started + deadline, self._flush_by)) as scope:
            self._flushing = scope
            while self.ledger.outcomes_pending():
                if self.ledger.count(Phase.DONE):
                    await self._write_until_done("recording outcomes")
                else:  # others are being written by another task: wait for them
                    await self.progress.wait()
            return
        left = self.ledger.jobs(Phase.DONE, Phase.WRITING)
        log.warning("worker %s: gave up writing %d outcomes after %.1fs; those jobs come back "
                    "when their lease expires: %s", self.worker, len(left),
                    anyio.current_time() - started, describe_jobs(left))  # fmt: skip


def _split(
    batch: list[tuple[Job, Outcome]],
) -> tuple[list[int], list[Failure], dict[int, str] | None]:
    """The ids of the successes, the failures, and the return values to keep
    (by job id; None when there is none, as for most batches)."""
    succeeded = [job.id for job, o in batch if o.failure is None]
    failures = [o.failure for _, o in batch if o.failure is not None]
    results = {job.id: o.result for job, o in batch if o.result is not None}
    return succeeded, failures, results or None
