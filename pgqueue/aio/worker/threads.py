"""Plain-function jobs in worker threads, a few to a thread hop.

A hop costs more than a trivial handler, so a runner that begins plain
jobs takes its fair share of those waiting (`Chunk`) and runs them one after
another in one thread, until one of them is slow enough to be worth a hop
of its own (`WORTH_A_HOP`; a kind that was slow last time begins a hop of
its own from then on), so that a quick job's outcome never waits for a
slow one's. Runners with nothing else to do share out what a chunk has
not begun once it has waited a millisecond behind one run
(`Threads.steal`): a few blocking jobs claimed together spread over as
many threads, and a slow handler never holds back the jobs queued behind
it. Trivial jobs share hops; no job waits for a handler much longer than
a hop would take while a runner is idle.

`call_plain` runs one plain handler in its thread, in its job's context
(`pgqueue.job_context()`) and span, and encodes its return value there,
off the event loop: for chunks and for the runners' single jobs alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import anyio
import anyio.to_thread

from ...core import tracing
from ...core.context import CURRENT, JobContext
from ...core.jobs import Job
from ...core.ledger import Ledger
from ...core.results import encode_result
from ...core.states import Event
from ...core.worker import CANCELLED_UNSTARTED, INTERRUPTED, Handlers, Outcome, WorkerSettings
from .chunk import Chunk, Ran
from .completer import Completer

__all__ = ["Threads", "call_plain", "log_cancel_asked"]

log = logging.getLogger("pgqueue.worker")

# A handler that ran this long (seconds) ends its thread hop: a hop costs
# tens of microseconds, nothing beside such a job, and the outcomes of the
# chunk so far (a limit's slot among them) should not wait for the rest.
# Well above what a trivial handler takes when its thread is preempted on
# a busy machine (a millisecond did: trivial chunks were cut into hops).
WORTH_A_HOP = 0.005

# A run this long (seconds) lets idle runners take the runs its chunk has
# not begun (`Threads.steal`). Lower than `WORTH_A_HOP`: a steal costs one
# hop for the runs taken, where a job waiting behind a slow one can wait a
# whole run (a kind known quick whose next jobs block: a burst of them, all
# in one chunk, began 5-10 ms late at this threshold's old value).
STEAL_AFTER = 0.001


def call_plain(handler: Callable[..., Any], context: JobContext, table: str) -> Ran:
    """In a worker thread: run one plain handler in its job's context, and
    encode its return value if the job keeps it."""
    job = context.job
    token = CURRENT.set(context)
    start = perf_counter()
    tracer = tracing.tracer
    try:
        if tracer is None:
            value = handler(job)
        else:
            with tracer.run(table, job, context.worker):
                value = handler(job)
        result = None if job.result_ttl is None else encode_result(value, job.kind)
    except Exception as exc:
        return context, exc, None, perf_counter() - start
    finally:
        CURRENT.reset(token)
    return context, None, result, perf_counter() - start


def log_cancel_asked(job: Job) -> None:
    """A running plain handler's cancel was requested: it can only be told."""
    log.info("job %d (%s): cancel requested; its handler (a plain function) "
             "stops if it checks pgqueue.job_context()", job.id, job.kind)  # fmt: skip


@dataclass(eq=False)
class Threads:
    """Owner of the chunks of plain jobs: which job runs in which chunk, and
    the outcomes of their runs. Called by the runners, on the event loop;
    every field below the shared ones is written here only."""

    settings: WorkerSettings
    handlers: Handlers
    ledger: Ledger[Outcome]
    completer: Completer
    limiter: anyio.CapacityLimiter  # the runners': at most ``concurrency`` threads
    table: str
    _chunks: set[Chunk] = field(default_factory=set, init=False)  # taken, not finished
    # Every job of a chunk whose outcome has not gone to the completer yet,
    # with its run and its chunk (which a `steal` changes).
    _runs: dict[int, tuple[JobContext, Chunk]] = field(default_factory=dict, init=False)
    _kinds: dict[str, bool] = field(default_factory=dict, init=False)  # kind -> `takes`
    # Kinds whose last run in a chunk was worth a hop of its own: written and
    # read by the chunks' threads (a hint: a race costs a hop, or saves one).
    _slow: set[str] = field(default_factory=set, init=False)
    # Kinds that have run in a chunk (written the same way): of these, the
    # ones not slow are known quick.
    _ran: set[str] = field(default_factory=set, init=False)

    def takes(self, kind: str) -> bool:
        """Whether jobs of ``kind`` run in chunks: a plain function with no
        timeout (a timed-out thread is abandoned alone)."""
        plain = self._kinds.get(kind)
        if plain is None:
            plain = self._kinds[kind] = (
                self.settings.job_timeout is None
                and self.handlers.get(kind) is not None
                and not self.handlers.is_async(kind)
            )
        return plain

    def take(self) -> Chunk:
        """Begin the next claimed jobs, while they are chunk jobs: a fair share
        of those waiting (one each while there are no more than runners), or
        all of them when the first is of a kind known quick (it ran, and
        not slowly, last time: one hop for them all), at most a batch; but
        a job of a kind that was slow last time alone (the next runner
        begins the next job at once). (A chunk's tail is shared out by
        `steal`, should one of them be slow after all.)"""
        ledger, runners = self.ledger, self.settings.concurrency
        waiting = min(self.settings.batch_size, ledger.unstarted)
        first = ledger.next_unstarted()
        quick = first is not None and first.kind in self._ran and first.kind not in self._slow
        share = waiting if quick else max(1, waiting // runners)
        worker, runs, slow = self.settings.name, list[JobContext](), self._slow
        while len(runs) < share:
            job = ledger.next_unstarted()
            if job is None or not self.takes(job.kind) or (runs and job.kind in slow):
                break
            ledger.start_next()
            runs.append(JobContext(job, worker))
            if job.kind in slow:
                break
        return self._chunk(runs)

    def steal(self, idle: int) -> tuple[Chunk | None, float | None]:
        """A share of what a chunk has not begun, as a chunk of its own, from
        the chunk with most such runs among those whose thread has been on
        its current run for `STEAL_AFTER`: one part in ``idle + 1``, for the
        ``idle`` runners with nothing to do (this one among them) and the
        chunk's own thread, so that runners woken together each take a part
        at once. Else None, and in how many seconds another chunk's tail
        will be worth taking (None if none has a tail)."""
        now, victim, most, soonest = perf_counter(), None, 0, None
        for chunk in self._chunks:
            left, since = chunk.waiting()
            if not left:
                continue
            wait = since + STEAL_AFTER - now
            if wait > 0:
                soonest = wait if soonest is None else min(soonest, wait)
            elif left > most:
                victim, most = chunk, left
        runs = victim.split(idle + 1) if victim is not None else []
        return (self._chunk(runs), None) if runs else (None, soonest)

    def _chunk(self, runs: list[JobContext]) -> Chunk:
        chunk = Chunk(runs)
        self._chunks.add(chunk)
        for context in runs:
            self._runs[context.job.id] = (context, chunk)
        return chunk

    def cancel(self, job_id: int) -> None:
        """Stop a chunk job: one not begun never starts, one running sees
        ``cancel_requested``. Other jobs, and a second request, are left alone."""
        run = self._runs.get(job_id)
        if run is None or not run[0].request_cancel():
            return
        context, chunk = run
        job = context.job
        if chunk.withdraw(context):
            del self._runs[job_id]
            log.info("job %d (%s) cancelled before it started", job_id, job.kind)
            self.completer.failed(job, CANCELLED_UNSTARTED, Event.CANCEL)
        else:
            log_cancel_asked(job)

    def close(self) -> None:
        """Begin nothing more: the jobs of chunks not begun are released."""
        for chunk in self._chunks:
            for job in chunk.cut():
                del self._runs[job.id]
                self.completer.failed(job, "released", Event.RELEASE)

    async def run(self, chunk: Chunk) -> None:
        """Run a chunk in a worker thread, a hop until it ends or a handler
        is slow (`WORTH_A_HOP`); on `close`, its jobs not begun are cut off
        and released."""
        try:
            while True:
                # Abandoned on cancel (the grace period ran out): see `Worker`.
                await anyio.to_thread.run_sync(
                    self._call_chunk, chunk, abandon_on_cancel=True, limiter=self.limiter
                )
                if not chunk.unbegun():
                    break
                self._ended(chunk.take_ran())
        finally:
            self._chunks.discard(chunk)
            ran, abandoned, never_begun = chunk.finish()
            self._ended(ran)
            runs, completer = self._runs, self.completer
            for context in abandoned:
                del runs[context.job.id]
                completer.failed(context.job, INTERRUPTED, Event.EXPIRE)
            for job in never_begun:
                del runs[job.id]
                completer.failed(job, "released", Event.RELEASE)

    def _ended(self, ran: list[Ran]) -> None:
        """Hand the outcomes of ended runs to the completer."""
        runs, completer = self._runs, self.completer
        for context, exc, result, duration in ran:
            job = context.job
            del runs[job.id]
            if exc is None:
                completer.succeeded(job, duration, result)
            else:
                completer.raised(context, exc, duration)

    def _call_chunk(self, chunk: Chunk) -> None:
        """In a worker thread: run the chunk's handlers until it ends or is
        cut, or until a handler worth a hop of its own has run or is next
        (its kind was slow last time): the outcomes so far then go out at
        once, and the rest waits for the next hop (or an idle runner's `steal`)."""
        handlers, table, slow = self.handlers, self.table, self._slow
        context = chunk.start_next()
        while context is not None:
            kind = context.job.kind
            handler = handlers.get(kind)
            assert handler is not None
            chunk.ran_one(call_plain(handler, context, table))
            self._ran.add(kind)
            if perf_counter() - chunk.since >= WORTH_A_HOP:  # since it began
                slow.add(kind)
                return
            if slow:
                slow.discard(kind)
            context = chunk.start_next(unless=slow)
