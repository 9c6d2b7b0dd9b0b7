"""The health keeper: stamps the worker's health for a probe (`pgqueue.core.health`).

Every `TURN_EVERY` seconds it stamps ``turned_at`` (the event loop is
turning); when no database call of the worker has returned for
`PING_AFTER` seconds (it runs a batch of long jobs, say), it reads the
schema version, so that ``reached_at`` (stamped by `Calls`) says whether
the database could still be reached, whatever the worker is doing.
"""

from __future__ import annotations

import time
from contextlib import suppress

import anyio
import psycopg

from ...core.health import PING_AFTER, TURN_EVERY
from .calls import DATABASE_ERRORS, Calls, WorkerQueue

__all__ = ["HealthKeeper"]


class HealthKeeper:
    """Owner of ``turned_at`` in the worker's `HealthStamps` (``reached_at`` is `Calls`')."""

    def __init__(self, calls: Calls, queue: WorkerQueue) -> None:
        self.calls = calls
        self.queue = queue

    async def run(self) -> None:
        stamps = self.calls.health
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._ping)
            while True:
                stamps.turned_at = time.monotonic()
                await anyio.sleep(TURN_EVERY)

    async def _ping(self) -> None:
        stamps = self.calls.health
        while True:
            quiet = time.monotonic() - stamps.reached_at
            if quiet < PING_AFTER:
                await anyio.sleep(PING_AFTER - quiet)
                continue
            # Whatever fails (the table gone too) leaves reached_at as it was,
            # and the next try comes after PING_AFTER.
            with suppress(psycopg.Error, *DATABASE_ERRORS):
                await self.calls("health check", self.queue.schema_version)
                continue
            await anyio.sleep(PING_AFTER)
