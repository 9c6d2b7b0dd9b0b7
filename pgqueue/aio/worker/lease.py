"""The lease keeper: renews the lease of every job this worker still means to run.

Every ``visibility_timeout / 4`` one statement renews the jobs the ledger
says are claimed, held or running. A job the database no longer counts as
this worker's (its lease expired and another worker's reaper took it) is
lost: not started if it was waiting, its outcome not written if it runs.

The same statement says which of those jobs' cancel was requested; they
go to the runners (`Runners.cancel`), and this keeper is the only one that
sends them there: every cancel a worker acts on is one the table confirms.
A control notification only makes the keeper look at once (the notifier's
``look_now``): a read of the flags of the jobs held here, which writes
nothing and locks nothing, so that a notification anyone sends costs a
read at most. So that a lost notification costs little, the keeper also
looks every `UNHEARD_BEAT` seconds while the notifier is not listening
(not connected yet, its connection lost or silent, or a run with no
listener) (a heartbeat a second, which rewrites the rows, slowed a drain
by a tenth), and at once when the notifier listens again or stops.
A tick of its own (every second) that comes late by more than a third of
the visibility timeout means the event loop was blocked (an ``async def``
handler that does not await): the leases were at risk, and the log says
which jobs ran then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import anyio

from ...core.events import one_line
from ...core.jobs import Job
from ...core.ledger import Ledger, Phase
from ...core.worker import Outcome, WorkerSettings, describe_jobs
from .calls import DATABASE_ERRORS, Calls, WorkerQueue
from .notifier import Notifier

__all__ = ["UNHEARD_BEAT", "LeaseKeeper", "beat_interval"]

log = logging.getLogger("pgqueue.worker")

# Seconds between heartbeats while no notification can bring a cancel: SPEC
# §5 wants a cancel to reach a running job within a second regardless.
UNHEARD_BEAT = 1.0
# How often the loop's watch ticks (at most a sixth of the visibility timeout).
LOOP_TICK = 1.0


def beat_interval(settings: WorkerSettings, listening: bool) -> float:
    """Seconds between the keeper's looks: a quarter of the visibility
    timeout while the notifier listens (cancels arrive by notification),
    else at most `UNHEARD_BEAT` (a look is how they arrive)."""
    interval = settings.heartbeat_interval
    return interval if listening else min(interval, UNHEARD_BEAT)


def _ignore(job_ids: Iterable[int]) -> None:
    pass


@dataclass(eq=False)
class LeaseKeeper:
    """Owner of the heartbeat; moves lost jobs in the ledger (LOSE) and nothing
    else, and hands the jobs whose cancel was requested to ``cancel``."""

    settings: WorkerSettings
    queue: WorkerQueue
    calls: Calls
    ledger: Ledger[Outcome]
    cancel: Callable[[Iterable[int]], None] = _ignore  # the runners' `Runners.cancel`
    # Read here: its ``listening`` (whether cancels arrive by notification)
    # and ``look_now`` (set by it, waited on here). None: never listens.
    notifier: Notifier | None = None

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_the_loop)
            await self._keep()

    async def _watch_the_loop(self) -> None:
        """Warn when the event loop was blocked for a third of the visibility
        timeout: a tick of its own, so that a block is seen whatever the
        keeper awaits then (a heartbeat in flight too)."""
        timeout = self.settings.visibility_timeout.total_seconds()
        tick = min(LOOP_TICK, timeout / 6)
        while True:
            # The jobs running now, for the warning if the loop blocks before
            # the next tick (by then the job that blocked it may be done).
            before = self.ledger.jobs(Phase.RUNNING)
            due = anyio.current_time() + tick
            await anyio.sleep_until(due)
            late = anyio.current_time() - due  # the sleep's overrun only
            if late > timeout / 3:
                self._warn_blocked(late, before)

    async def _keep(self) -> None:
        notifier = self.notifier
        next_beat = anyio.current_time() + self.settings.heartbeat_interval
        while True:
            interval = beat_interval(self.settings, notifier is not None and notifier.listening)
            due = min(anyio.current_time() + interval, next_beat)
            if notifier is not None:
                # Set when listening again (a cancel sent meanwhile may be
                # lost), no longer listening (look now, then every second),
                # or for a control notification that may name a job held
                # here. Either way, a look comes now, and a beat when due.
                await notifier.look_now.wait_for(max(due - anyio.current_time(), 0))
            else:
                await anyio.sleep_until(due)
            if anyio.current_time() >= next_beat:
                await self.beat()
                next_beat = anyio.current_time() + self.settings.heartbeat_interval
            else:
                await self.look_for_cancels()

    async def look_for_cancels(self) -> None:
        """Which of the jobs held here had their cancel requested: read only,
        between heartbeats (told by a notification, or every second while
        none can come)."""
        jobs = self.ledger.leased()
        if not jobs:
            return
        try:
            ids = await self.calls("looking for cancels", self.queue.cancel_requests,
                                   [j.id for j in jobs])  # fmt: skip
        except DATABASE_ERRORS as exc:
            log.warning("worker %s: looking for cancels failed (%s)", self.settings.name,
                        one_line(exc))  # fmt: skip
            return
        if ids:
            self.cancel(ids)

    async def beat(self) -> None:
        """Renew the leases; jobs the database says are no longer held are lost,
        and those whose cancel was requested are cancelled."""
        jobs = self.ledger.leased()
        if not jobs:
            return
        try:
            beat = await self.calls("heartbeat", self.queue.heartbeat, [j.id for j in jobs],
                                    worker=self.settings.name)  # fmt: skip
        except DATABASE_ERRORS as exc:
            log.warning("worker %s: heartbeat failed (%s)", self.settings.name,
                        one_line(exc))  # fmt: skip
            return
        held = beat.held
        if beat.cancel:
            self.cancel(beat.cancel)
        if len(held) < len(jobs):
            kept = set(held)
            lost = self.ledger.lose(j.id for j in jobs if j.id not in kept)
            if lost:
                log.warning(
                    "worker %s: lost the lease of %d jobs (expired and taken back; another "
                    "worker may run them): %s",
                    self.settings.name, len(lost), describe_jobs(lost),
                )  # fmt: skip

    def _warn_blocked(self, late: float, before: list[Job]) -> None:
        now = self.ledger.jobs(Phase.RUNNING)
        running = before + [job for job in now if job not in before]
        log.warning(
            "worker %s: the event loop was blocked for about %.1fs (heartbeat late), a third "
            "of the visibility timeout or more: leases were at risk and another worker may run "
            "these jobs again; run blocking code in a plain (def) handler, which runs in a "
            "thread (docs/handlers.md). Running: %s",
            self.settings.name, late, describe_jobs(running) or "none",
        )  # fmt: skip
