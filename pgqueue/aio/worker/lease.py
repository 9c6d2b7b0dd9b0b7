"""The lease keeper: renews the lease of every job this worker still means to run.

Every ``visibility_timeout / 4`` one statement renews the jobs the ledger
says are claimed, held or running. A job the database no longer counts as
this worker's (its lease expired and another worker's reaper took it) is
lost: not started if it was waiting, its outcome not written if it runs.
A heartbeat that comes late by more than a third of the visibility timeout
means the event loop was blocked (an ``async def`` handler that does not
await): the leases were at risk, and the log says which jobs ran then.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio

from ...core.events import one_line
from ...core.jobs import Job
from ...core.ledger import Ledger, Phase
from ...core.worker import Outcome, WorkerSettings, describe_jobs
from .calls import DATABASE_ERRORS, Calls, WorkerQueue

__all__ = ["LeaseKeeper"]

log = logging.getLogger("pgqueue.worker")


@dataclass(eq=False)
class LeaseKeeper:
    """Owner of the heartbeat; moves lost jobs in the ledger (LOSE) and nothing else."""

    settings: WorkerSettings
    queue: WorkerQueue
    calls: Calls
    ledger: Ledger[Outcome]

    async def run(self) -> None:
        interval = self.settings.heartbeat_interval
        timeout = self.settings.visibility_timeout.total_seconds()
        while True:
            # The jobs running now, for the warning if the loop blocks before
            # the next beat (by then the job that blocked it may be done).
            before = self.ledger.jobs(Phase.RUNNING)
            due = anyio.current_time() + interval
            await anyio.sleep_until(due)
            late = anyio.current_time() - due  # the sleep's overrun only, not the beat's wait
            if late > timeout / 3:
                self._warn_blocked(late, before)
            await self.beat()

    async def beat(self) -> None:
        """Renew the leases; jobs the database says are no longer held are lost."""
        jobs = self.ledger.leased()
        if not jobs:
            return
        try:
            held = await self.calls("heartbeat", self.queue.heartbeat, [j.id for j in jobs],
                                    worker=self.settings.name)  # fmt: skip
        except DATABASE_ERRORS as exc:
            log.warning("worker %s: heartbeat failed (%s)", self.settings.name,
                        one_line(exc))  # fmt: skip
            return
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
