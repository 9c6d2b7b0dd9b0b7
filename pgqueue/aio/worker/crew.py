"""One run of a worker: its components, wired together, started and stopped in order.

A `Crew` is made new by every `AsyncWorker.run`, so that nothing of one
run (a wake-up left set, a ledger entry, a listener error count) reaches
the next. Who owns what:

| component | owns | started |
|---|---|---|
| `Fetcher` | claims in flight, orphan looks | always |
| `Runners` | runner tasks, the jobs they run alone, cancels, the grace period | always |
| `Threads` (the runners') | chunks of plain jobs in worker threads, and their tails | always |
| `Completer` | every write of an outcome | always |
| `LeaseKeeper` | the heartbeat, looks for cancels (the runners' only source); leases | always |
| `Reaper` | returning other workers' expired jobs | not ``until_empty`` |
| `Notifier` | the LISTEN connection and its thread; `listening` | not ``until_empty``; (*) |
| `Calls` | the deadline and stall log of every database call; ``reached_at`` | always |
| `HealthKeeper` | ``turned_at``; a read when the calls have been quiet | always |
| `Reporter` | log lines and listener events | always |
| `Scheduler` | the worker's schedules: their registration and ticks | with schedules |

(*) Not through a transaction pooler without ``listen_conninfo``
(`pgqueue.core.pooling.worker_listens`): the worker polls.

The ledger (`pgqueue.core.ledger`) is where every job stands; only the
component named beside each of its methods calls it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from ...core.events import EventListener
from ...core.health import HealthStamps
from ...core.ledger import Ledger
from ...core.pooling import worker_listens
from ...core.schedules import Schedule
from ...core.worker import (
    ABORT_FLUSH,
    CLAIM_CUT,
    FLUSH_DEADLINE,
    Handlers,
    Outcome,
    Pace,
    WorkerSettings,
)
from .calls import Calls, WorkerQueue
from .completer import Completer
from .fetcher import Fetcher
from .flags import Broadcast, Wakeup
from .health import HealthKeeper
from .lease import LeaseKeeper
from .notifier import Notifier
from .reaper import Reaper
from .reporter import Reporter
from .runners import Runners
from .scheduler import Scheduler

__all__ = ["Crew"]

log = logging.getLogger("pgqueue.worker")


class Crew:
    """The components of one worker run (see the module's table)."""

    def __init__(
        self,
        queue: WorkerQueue,
        settings: WorkerSettings,
        handlers: Handlers,
        listeners: Sequence[EventListener],
        schedules: Sequence[Schedule] = (),
        health: HealthStamps | None = None,
    ) -> None:
        name = settings.name
        self.settings = settings
        self.ledger: Ledger[Outcome] = Ledger()
        self.reporter = Reporter(name, queue.table, listeners)
        self.calls = Calls(name, queue.table, deadline=settings.call_timeout, health=health)
        self.health = HealthKeeper(self.calls, queue)
        progress, demand = Broadcast(), Wakeup()
        self.completer = Completer(
            queue, self.calls, self.ledger, self.reporter, progress, worker=name
        )
        pace = Pace(settings.concurrency, settings.batch_size)
        self.runners = Runners(settings, handlers, self.ledger, self.completer, demand, pace,
                               table=queue.table)  # fmt: skip
        self.fetcher = Fetcher(settings, queue, self.calls, self.ledger, self.completer,
                               self.runners, self.reporter, demand, progress, pace)  # fmt: skip
        self.completer.slot_freed = self.fetcher.slot_freed
        self.completer.ran = pace.ran
        self.reaper = Reaper(settings, queue, self.calls, self.reporter, self.fetcher)
        # Cancel requests reach the runners from the table only: a control
        # notification makes the lease keeper look (every second while
        # nobody listens), and the keeper hands on what the table says.
        self.notifier = Notifier(name, queue, self.fetcher.wakeup, self.fetcher.reached,
                                 conninfo=settings.listen_conninfo,
                                 holds=self.ledger.holds)  # fmt: skip
        # Not through a transaction pooler: the worker then polls, and the
        # lease keeper looks for cancels every second (nobody listens).
        self._listens = worker_listens(
            settings.listen_conninfo, transaction_pooling=queue.transaction_pooling
        )
        self.lease = LeaseKeeper(settings, queue, self.calls, self.ledger, self.runners.cancel,
                                 self.notifier)  # fmt: skip
        self.scheduler = (
            Scheduler(schedules, queue, self.calls, self.reporter, name) if schedules else None
        )
        self._fetching: anyio.CancelScope | None = None
        self._stopping = False
        # When the running jobs' grace period ends: counted from the first
        # stop, not from the end of a claim in flight then.
        self._grace_ends: float | None = None

    def stop(self) -> None:
        """(On the event loop.) Stop claiming; running jobs get the grace period."""
        self._stopping = True
        if self._grace_ends is None:
            self._grace_ends = anyio.current_time() + self.settings.grace_period
        if self.scheduler is not None:
            self.scheduler.stop()
        if self._fetching is not None:
            self._fetching.cancel()
            self.fetcher.shields.cut_after(min(CLAIM_CUT, self.settings.grace_period))

    def abort(self) -> None:
        """(On the event loop; a second signal.) Interrupt running jobs now,
        give up on claims in flight, and give the last outcomes at most
        `ABORT_FLUSH` more (the jobs of those not written come back through
        the lease)."""
        self.stop()
        self.fetcher.shields.cut_after(0)
        self.runners.interrupt_after(0)
        self.completer.cut_flush_after(ABORT_FLUSH)

    async def run(self, *, until_empty: bool) -> None:
        async with anyio.create_task_group() as background:
            background.start_soon(self.calls.watch_stalls)
            background.start_soon(self.health.run)
            background.start_soon(self.completer.run)
            background.start_soon(self.lease.run)
            if not until_empty:
                if self._listens:
                    background.start_soon(self.notifier.run)
                else:
                    log.info("worker %s: no LISTEN through a transaction pooler (no "
                             "listen_conninfo): polling every %ss", self.settings.name,
                             self.settings.poll_interval)  # fmt: skip
                background.start_soon(self.reaper.run)
            if self.scheduler is not None:
                background.start_soon(self.scheduler.run)
            try:
                await self._work(until_empty)
            finally:
                # Bounded, and cut short by an `abort` that comes while it
                # runs: stopping never depends on the database.
                with anyio.CancelScope(shield=True):
                    await self.completer.flush(FLUSH_DEADLINE)
                background.cancel_scope.cancel()
        self.reporter.close()

    async def _work(self, until_empty: bool) -> None:
        async with anyio.create_task_group() as work:
            await work.start(self.runners.run)
            try:
                with anyio.CancelScope() as self._fetching:
                    if not self._stopping:
                        await self.fetcher.run(until_empty)
            finally:
                # Hand out nothing more, give back what no runner began, and
                # let the running jobs have the grace period.
                self.runners.close()
                self.completer.release_unstarted()
                grace = self.settings.grace_period
                if self._grace_ends is not None:
                    grace = max(0.0, self._grace_ends - anyio.current_time())
                self.runners.interrupt_after(grace)
