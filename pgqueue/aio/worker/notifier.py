"""The notifier: LISTEN on a connection of its own, in a thread; wake the fetcher.

The connection is made as the queue's pool makes its own (same conninfo
and keyword arguments), or from ``listen_conninfo`` when a pooler that
cannot LISTEN stands in front of the server. It is a bonus: the worker
polls from its first second, whether LISTEN works or not, and a lost
connection is made again with the worker's retry backoff. A thread rather
than psycopg's async ``notifies()``, so that one notifier serves asyncio
and trio alike.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import psycopg

from ...core.events import one_line
from ...core.worker import RETRY_BACKOFF
from ...sync.driver import connection_kwargs
from .calls import WorkerQueue
from .flags import Wakeup

__all__ = ["Notifier"]

log = logging.getLogger("pgqueue.worker")


class Notifier:
    """Owner of the LISTEN connection and its thread. ``_stop`` is set by
    `run` when it ends and read by the thread; ``wakeup`` is the fetcher's."""

    def __init__(
        self,
        worker: str,
        queue: WorkerQueue,
        wakeup: Wakeup,
        reached: anyio.Event,
        *,
        conninfo: str | None = None,
    ) -> None:
        self.worker = worker
        self.queue = queue
        self.wakeup = wakeup
        # Set by the fetcher once a claim came back: LISTEN waits for it, so
        # that under a tight connection limit the claims get a connection first.
        self.reached = reached
        self.conninfo = conninfo
        self._stop = threading.Event()

    async def run(self) -> None:
        token = anyio.lowlevel.current_token()
        errors = 0
        await self.reached.wait()
        try:
            while True:
                started = anyio.Event()
                try:
                    await self._listen_until_lost(token, started)
                except Exception as exc:
                    log.warning("worker %s: listener lost (%s); polling meanwhile", self.worker,
                                one_line(exc))  # fmt: skip
                errors = 0 if started.is_set() else errors + 1
                await anyio.sleep(RETRY_BACKOFF.delay(errors).total_seconds())
        finally:
            self._stop.set()

    async def _listen_until_lost(
        self, token: anyio.lowlevel.EventLoopToken, started: anyio.Event
    ) -> None:
        kwargs: dict[str, Any] = {}
        if self.conninfo is not None:
            conninfo = self.conninfo
        else:
            conninfo, kwargs = await self.queue.connection_settings()
        lost: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._on_start, started)
            try:
                await anyio.to_thread.run_sync(
                    self._listen, conninfo, kwargs, token, started, abandon_on_cancel=True
                )
            except Exception as exc:
                lost = exc  # raised here, not from the task group (no exception group)
            tg.cancel_scope.cancel()
        if lost is not None:
            raise lost

    async def _on_start(self, started: anyio.Event) -> None:
        await started.wait()
        # A notification sent while (re)connecting is lost: look now.
        self.wakeup.set()

    def _listen(
        self,
        conninfo: str,
        kwargs: dict[str, Any],
        token: anyio.lowlevel.EventLoopToken,
        started: anyio.Event,
    ) -> None:
        """(In a thread.) Connect, LISTEN, and wake the fetcher at each notification."""
        with psycopg.Connection.connect(conninfo, **connection_kwargs(conninfo, kwargs)) as conn:
            conn.execute(self.queue.core.sql.listen)
            anyio.from_thread.run_sync(started.set, token=token)
            while not self._stop.is_set():
                for _ in conn.notifies(timeout=0.5, stop_after=1):
                    anyio.from_thread.run_sync(self.wakeup.set, token=token)
