"""The scheduler: enqueues the ticks of the worker's schedules (docs/schedules.md).

Started by the crew only when the worker has schedules. It writes them into
the table, then loops: it reads the database's clock and each schedule's
last tick, runs the tick statement for each tick due (`Schedule.due`: every
worker computes the same ticks from the same clock), and sleeps until the
earliest next tick, at most `MAX_SLEEP`. No worker leads: of the workers
racing for one tick, the database lets the first statement enqueue its job
and the others write nothing. The worker's own clock is never read (it may
be skewed); a sleep is the database's time to the next tick, measured on
the monotonic clock from when that time was read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import anyio

from ...core.schedules import Schedule, Tick
from ...core.worker import RETRY_BACKOFF
from .calls import DATABASE_ERRORS, Calls, WorkerQueue
from .reporter import Reporter

__all__ = ["MAX_SLEEP", "Scheduler"]

log = logging.getLogger("pgqueue.worker")

# The longest the scheduler sleeps between two looks at its schedules.
MAX_SLEEP = 60.0


@dataclass(eq=False)
class Scheduler:
    """Owns its loop and ``_scope``, which `stop` cancels (the crew calls it)."""

    schedules: Sequence[Schedule]
    queue: WorkerQueue
    calls: Calls
    reporter: Reporter
    worker: str
    _scope: anyio.CancelScope = field(default_factory=anyio.CancelScope, init=False)

    def stop(self) -> None:
        """(On the event loop.) Enqueue no more ticks."""
        self._scope.cancel()

    async def run(self) -> None:
        """Register the schedules, then tick them, until `stop`; database errors are retried."""
        with self._scope:
            failures = 0
            registered = False
            while True:
                try:
                    if not registered:
                        await self.calls("scheduler", self.queue.register_schedules,
                                         self.schedules)  # fmt: skip
                        registered = True
                    wake = await self.turn()
                    failures = 0
                except DATABASE_ERRORS as exc:
                    failures += 1
                    delay = RETRY_BACKOFF.delay(failures).total_seconds()
                    self.reporter.retrying("scheduler", exc, delay)
                    wake = anyio.current_time() + delay
                await anyio.sleep_until(wake)

    async def turn(self) -> float:
        """Enqueue the ticks due; return when to look again (`anyio.current_time`)."""
        names = [s.name for s in self.schedules]
        now, last_ticks = await self.calls("scheduler", self.queue.schedule_clock, names)
        looked = anyio.current_time()
        missing = [s for s in self.schedules if last_ticks.get(s.name) is None]
        if missing:  # a row deleted (or its last tick cleared) under a running worker: from now
            await self.calls("scheduler", self.queue.register_schedules, missing)
        next_tick = now + timedelta(seconds=MAX_SLEEP)
        for schedule in self.schedules:
            try:
                due = schedule.due(last_ticks.get(schedule.name), now)
            except ValueError as exc:  # a cron expression with no tick ahead of it
                log.error("worker %s: schedule %s: %s", self.worker, schedule.name, exc)
                continue
            won = False
            for tick in due.ticks:
                done = await self.calls("scheduler", self.queue.tick_schedule, schedule, tick)
                self._report(schedule, tick, done)
                won = won or done.won
            if due.skipped is not None and won:
                first, last = due.skipped
                log.warning(
                    "worker %s: schedule %s missed its ticks from %s to %s (no worker ran it): "
                    "skipped, enqueued the latest %d only (backfill=%d)",
                    self.worker, schedule.name, _time(first), _time(last), len(due.ticks),
                    schedule.backfill,
                )  # fmt: skip
            next_tick = min(next_tick, due.next_tick)
        return looked + (next_tick - now).total_seconds()

    def _report(self, schedule: Schedule, tick: datetime, done: Tick) -> None:
        name, at = schedule.name, _time(tick)
        if done.job_id is not None:
            log.info("worker %s: schedule %s enqueued job %d (%s) for its tick at %s",
                     self.worker, name, done.job_id, schedule.kind, at)  # fmt: skip
        elif not done.won:
            log.debug("worker %s: schedule %s: tick at %s recorded by another worker",
                      self.worker, name, at)  # fmt: skip
        elif done.paused:
            log.info("worker %s: schedule %s is paused: tick at %s skipped", self.worker,
                     name, at)  # fmt: skip
        else:
            log.info("worker %s: schedule %s: tick at %s skipped, its previous job is still "
                     "pending or running (overlap=False)", self.worker, name, at)  # fmt: skip


def _time(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")
