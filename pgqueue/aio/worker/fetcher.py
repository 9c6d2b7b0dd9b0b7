"""The fetcher: claims batches for the runners, and orphaned jobs to run alone.

A claim is sent when a runner is free, or, for handlers quicker than a
claim, when what the worker holds is down by half a batch; it asks for
what `Pace` says (one job per runner, and what the runners finish while
claims make their round trip) and carries every outcome waiting
(`Completer.turn`). When the runners ran dry waiting for the last claim,
the next one goes out earlier, so that two claims are in flight. A claim
that comes back short (or empty) sends the fetcher to sleep until a
notification, an outcome or ``poll_interval``. A limited job's outcome is
not left to wait: while a runner is about to be free, a claim carries it
at once (and claims the next job of its key on its slot).

An orphaned job (`Job.orphaned`: its last worker vanished holding it) is
kept out of batches and run alone: held until nothing else is claimed,
running or unwritten, then run; and straight after it, the next orphan.
A busy worker looks for one once a reap interval, or at once when its
reaper has just returned some; an idle one after every empty claim.
"""

from __future__ import annotations

import logging
from contextlib import suppress
from dataclasses import dataclass, field

import anyio
import psycopg
import psycopg.errors

from ...core.heads import Heads
from ...core.jobs import Job
from ...core.ledger import Ledger, Phase
from ...core.ops import WorkerClaim
from ...core.worker import RETRY_BACKOFF, Outcome, Pace, WorkerSettings
from .calls import DATABASE_ERRORS, Calls, Shields, WorkerQueue
from .completer import Completer
from .flags import Broadcast, Wakeup
from .reporter import Reporter
from .runners import Runners

__all__ = ["Fetcher"]

log = logging.getLogger("pgqueue.worker")

MAX_CLAIMS_IN_FLIGHT = 2


@dataclass(eq=False)
class Fetcher:
    """Owner of the claims: how many are in flight, when to send the next,
    when to look for orphans. Every field below the shared ones is written
    here only."""

    settings: WorkerSettings
    queue: WorkerQueue
    calls: Calls
    ledger: Ledger[Outcome]
    completer: Completer
    runners: Runners
    reporter: Reporter
    demand: Wakeup  # set by the runners at their low-water mark, and by claims as they land
    progress: Broadcast  # notified by the runners and the completer
    # How many jobs to hold: the completer reports run times (`Pace.ran`),
    # the runners read the low-water mark; written here only.
    pace: Pace
    wakeup: Wakeup = field(default_factory=Wakeup)  # set by the notifier and the reaper
    # Set once a claim has come back (done or failed): the notifier waits
    # for it, so that LISTEN never takes the connection a claim needs first.
    reached: anyio.Event = field(default_factory=anyio.Event)
    _in_flight: int = field(default=0, init=False)
    _coming: int = field(default=0, init=False)  # the most jobs the claims in flight may bring
    _starved: bool = field(default=False, init=False)  # the runners ran dry waiting last time
    _alone: bool = field(default=False, init=False)  # an orphan is held or running
    # An outcome that frees a limit's slot waits to be written, or was just
    # written (`slot_freed`): while a runner is about to be free, the next
    # claim goes at once, so that a waiting job of the key takes the slot.
    _slot_freed: bool = field(default=False, init=False)
    _errors: int = field(default=0, init=False)  # database errors in a row
    _next_orphan_look: float = field(default=0.0, init=False)
    # Set by a claim that found nothing with no other in flight: whether
    # nothing was held either (the queue is drained).
    _found_nothing: bool | None = field(default=None, init=False)
    # When a key with a rate, whose jobs the last claim left for want of a
    # token, has one again (`Turn.token_in`): the idle wait ends then.
    _token_at: float = field(default=float("inf"), init=False)
    _draining: bool = field(default=False, init=False)  # run(until_empty=True)
    # Where each claim starts in each level (`pgqueue.core.heads`).
    heads: Heads = field(default_factory=Heads, init=False)
    claim: WorkerClaim = field(init=False)  # what every claim of this run takes
    # Claims in flight are shielded from a stop, within its grace period.
    shields: Shields = field(default_factory=Shields, init=False)

    def __post_init__(self) -> None:
        s = self.settings
        # A limited job's slot is held from its claim: claim no more of them
        # than the runners can start.
        self.claim = WorkerClaim.of(s.name, s.kinds, s.queues, s.claim_bytes, s.concurrency)
        # A worker (re)started after a crash looks at once: the orphans may be its own.
        self._next_orphan_look = anyio.current_time()

    def slot_freed(self) -> None:
        """(Completer.) A limited job's outcome is decided, or written: claim now."""
        self._slot_freed = True
        self.demand.set()
        self.wakeup.set()

    def look_for_orphans_now(self) -> None:
        """(Reaper.) Jobs were just returned: the next turn looks for an orphan."""
        self._next_orphan_look = 0.0
        self.wakeup.set()

    async def run(self, until_empty: bool) -> None:
        """Claim until cancelled (`AsyncWorker.stop`) or, with ``until_empty``,
        until a claim made with nothing held finds nothing."""
        self._draining = until_empty
        async with anyio.create_task_group() as claims:
            while True:
                if self._found_nothing is not None:
                    idle, self._found_nothing = self._found_nothing, None
                    if idle and await self._run_orphans():
                        continue
                    if until_empty:
                        if idle:
                            claims.cancel_scope.cancel()
                            return
                        if self.ledger.busy():
                            await self.progress.wait()  # its outcome may free more work
                    else:
                        token_in = self._token_at - anyio.current_time()
                        await self.wakeup.wait_for(min(self.settings.poll_interval, token_in))
                elif size := self._claim_size():
                    if not await self._orphans_first():
                        self._in_flight += 1
                        self._coming += size
                        self._slot_freed = False  # this claim carries it, or sees it
                        claims.start_soon(self._claim, size)
                else:
                    await self.demand.wait()

    def _claim_size(self) -> int:
        """How many jobs to claim now (0: no claim yet): `Pace.size`, counting
        the claims in flight; at once for a limited job's outcome."""
        if self._alone or self._in_flight >= MAX_CLAIMS_IN_FLIGHT:
            return 0
        if self._slot_freed and self.ledger.unstarted < self.settings.concurrency:
            return self.pace.limit
        if self._in_flight and not self._starved:
            return 0  # a second claim only beside runners that ran dry
        held = self.ledger.count(Phase.CLAIMED, Phase.RUNNING) + self._coming
        return self.pace.size(held, self._starved)

    async def _claim(self, size: int) -> None:
        """One claim of ``size`` jobs (``_in_flight`` and ``_coming`` counted by
        the caller): hand out what it found, or tell the loop that it found
        nothing."""
        quiet = not self.ledger.busy() and self._in_flight == 1
        jobs: list[Job] = []  # unless the claim returns before a stop gives up on it
        carried = walked = 0
        token_in: float | None = None
        heads = self.heads.send(now=anyio.current_time())
        try:
            # Shielded: a claim that committed is never dropped on the floor
            # (unless a stop finds it still waiting after the grace period).
            sent = anyio.current_time()
            with self.shields.shielded():
                jobs, carried, token_in, walked = await self.completer.turn(self.claim, size, heads)
        except DATABASE_ERRORS as exc:
            if isinstance(exc, psycopg.errors.QueryCanceled) and self.pace.cancelled(size):
                self._errors = 0  # a smaller claim is a new try, not a repeat
                log.warning("worker %s: a claim of %d jobs was cancelled by the server "
                            "(statement_timeout?); claiming at most %d jobs at a time from now "
                            "on", self.settings.name, size, self.pace.limit)  # fmt: skip
            # Still counted in flight while it backs off: no other claim meanwhile.
            await self._pause("claim", exc)
            self._landed(size)
            return
        self.pace.claimed(anyio.current_time() - sent)
        self._landed(size, counted=True)
        self._errors = 0
        self.heads.landed(heads, jobs, walked=walked, limit=size, now=anyio.current_time())
        self.reached.set()
        self._token_at = float("inf") if token_in is None else anyio.current_time() + token_in
        if jobs:
            # A claim that came back short took every job it could (unless its
            # batch was cut by its payloads' size): no claim earlier next
            # time, and none at the low-water mark until there is news (a
            # notification, a slot freed, the poll), as after an empty one.
            short = len(jobs) < size and self.settings.claim_bytes is None
            # Ran dry waiting: claim earlier. Plenty left: claim later.
            if self.ledger.unstarted == 0:
                self._starved = not short
            elif self.ledger.unstarted > self.pace.low_water():
                self._starved = False
            jobs = await self.completer.new_to_this_worker(jobs)
            if self.reporter.wanted:
                self.reporter.claimed(jobs)
            self.runners.hand_out(jobs)
            if short and self._in_flight == 0 and not self._slot_freed:
                self._found_nothing = False
        else:
            # Nothing came: no second claim beside one still in flight (two
            # empty claims could otherwise keep each other going).
            self._starved = False
            if heads.heads and self._draining:
                # Jobs may wait behind the heads: a rescan says whether the
                # queue is drained.
                self.heads.rescan_next()
            elif self._in_flight == 0 and not self._slot_freed:
                # Outcomes recorded by that very statement (a failure due again
                # at once, say) were invisible to its claim: no proof of an
                # empty queue.
                self._found_nothing = quiet and not carried and not self.ledger.outcomes_pending()
        self._coming -= size

    def _landed(self, size: int, counted: bool = False) -> None:
        """A claim is no longer in flight: the loop and a held orphan look
        again. Its jobs stay ``_coming`` while ``counted`` (until handed out)."""
        self._in_flight -= 1
        if not counted:
            self._coming -= size
        self.demand.set()
        self.progress.notify()

    async def _orphans_first(self) -> bool:
        """Once a reap interval (or when the reaper asks), a busy worker runs
        the orphans there are before it claims on; True if it ran any."""
        if anyio.current_time() < self._next_orphan_look or not self.ledger.busy():
            return False
        self._next_orphan_look = anyio.current_time() + self.settings.reap_interval
        return await self._run_orphans()

    async def _run_orphans(self) -> bool:
        """Claim orphaned jobs one by one and run each alone; True if there was any."""
        ran = False
        while True:
            jobs: list[Job] = []
            try:
                with self.shields.shielded():
                    jobs = await self.calls("claim of an orphaned job", self.queue.claim_orphan,
                                            worker=self.settings.name,
                                            kinds=self.settings.kinds,
                                            queues=self.settings.queues)  # fmt: skip
            except DATABASE_ERRORS as exc:
                await self._pause("claim of an orphaned job", exc)
                return ran
            if not jobs or not (jobs := await self.completer.new_to_this_worker(jobs)):
                return ran
            ran = True
            await self._run_alone(jobs[0])

    async def _run_alone(self, job: Job) -> None:
        self._alone = True
        try:
            self.runners.hold(job)
            others = len(self.ledger) - 1
            if others or self._in_flight:
                log.info("job %d (%s): its last worker vanished holding it; held until the %d "
                         "jobs this worker has are done", job.id, job.kind, others)  # fmt: skip
            # Held (its lease renewed; given back at shutdown if the wait is cut
            # short) until nothing else is claimed, running or unwritten: if it
            # takes the process down, it must take nothing else with it.
            while len(self.ledger) > 1 or self._in_flight:
                await self.progress.wait()
            log.warning("job %d (%s): its last worker vanished holding it; running it alone",
                        job.id, job.kind)  # fmt: skip
            self.runners.unhold(job)
            while self.ledger.busy():
                if self.ledger.count(Phase.DONE):
                    # No claim will carry its outcome: write it now, not after the linger.
                    with suppress(*DATABASE_ERRORS):  # the completer retries it
                        await self.completer.write()
                else:
                    await self.progress.wait()
        finally:
            self._alone = False

    async def _pause(self, what: str, exc: BaseException) -> None:
        self._errors += 1
        delay = RETRY_BACKOFF.delay(self._errors).total_seconds()
        self.reporter.retrying(what, exc, delay)
        await anyio.sleep(delay)
