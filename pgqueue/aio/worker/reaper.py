"""The reaper: returns other workers' expired jobs to ``pending`` (or buries them).

Once a reap interval (``visibility_timeout / 2``, at most a minute, with
jitter so that workers started together spread out). When it returned
jobs, the fetcher is told to look for orphans at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import anyio

from ...core.jobs import JobStatus
from ...core.worker import WorkerSettings
from .calls import DATABASE_ERRORS, Calls, WorkerQueue
from .fetcher import Fetcher
from .reporter import Reporter

__all__ = ["Reaper"]


@dataclass(eq=False)
class Reaper:
    """Owns nothing but its loop."""

    settings: WorkerSettings
    queue: WorkerQueue
    calls: Calls
    reporter: Reporter
    fetcher: Fetcher

    async def run(self) -> None:
        interval = self.settings.reap_interval
        while True:
            await self.reap()
            await anyio.sleep(interval * (0.8 + random.random() * 0.4))

    async def reap(self) -> None:
        timeout = self.settings.visibility_timeout
        try:
            written = await self.calls("reaper", self.queue.reap_outcomes, timeout)
        except DATABASE_ERRORS as exc:
            self.reporter.retrying("reaper", exc, self.settings.reap_interval)
            return
        if written:
            self.reporter.reaped(written)
            if JobStatus.PENDING in written.values():
                self.fetcher.look_for_orphans_now()
