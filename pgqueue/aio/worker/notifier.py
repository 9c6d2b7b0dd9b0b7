"""The notifier: LISTEN on a connection of its own, in a thread; wake the fetcher,
and have the lease keeper look for cancel requests.

The connection is made as the queue's pool makes its own (same conninfo
and keyword arguments), or from ``listen_conninfo`` when a pooler that
cannot LISTEN stands in front of the server. It is a bonus: the worker
polls from its first second, whether LISTEN works or not, and a lost
connection is made again with the worker's retry backoff. A thread rather
than psycopg's async ``notifies()``, so that one notifier serves asyncio
and trio alike.

The same connection listens on the queue's control channel, whose
notifications name running jobs whose cancel was requested (their ids,
comma separated, or ``*`` when too many to name). A notification is a
hint, never an order: any login may send one on any channel, whatever its
grants. So it cancels nothing itself: when it names a job held here (or
``*``), the lease keeper looks at once which of the held jobs the table
says were asked to stop, and only those are cancelled (`look_now`); a
notification naming no job held here changes nothing. It never wakes the
fetcher. While it is not listening, the lease keeper looks every second
instead (`listening`). A connection that goes silent
without closing (a firewall or NAT that dropped it) looks alive: so the
thread makes a round trip on it every `PING_INTERVAL`, and a connection
that has not answered for `SILENT_AFTER` counts as not listening.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from time import monotonic
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import psycopg

from ...connection.settings import connection_kwargs
from ...core.events import one_line
from ...core.worker import RETRY_BACKOFF
from .calls import WorkerQueue
from .flags import Wakeup, call_soon

__all__ = ["Notifier", "cancelled_ids"]

log = logging.getLogger("pgqueue.worker")

# The LISTEN connection's round trip, and how long without an answer makes
# it silent (cancels then come by the heartbeat, every second).
PING_INTERVAL = 1.0
SILENT_AFTER = 2.5


def cancelled_ids(payload: str) -> list[int] | None:
    """The job ids a control notification names (``"12,13"``), or None for
    ``"*"`` (too many to name: the heartbeat says which); ValueError if it
    names something else.

    >>> cancelled_ids("12,13"), cancelled_ids("*")
    ([12, 13], None)
    """
    if payload.strip() == "*":
        return None
    return [int(part) for part in payload.split(",") if part.strip()]


def _holds_none(job_id: int) -> bool:
    return False


class Notifier:
    """Owner of the LISTEN connection and its thread. ``_stop`` is set by
    `run` when it ends and read by the thread; ``wakeup`` is the fetcher's;
    ``holds`` (the ledger's `Ledger.holds`) says on the event loop whether a
    job named by a control notification is held here."""

    def __init__(
        self,
        worker: str,
        queue: WorkerQueue,
        wakeup: Wakeup,
        reached: anyio.Event,
        *,
        conninfo: str | None = None,
        holds: Callable[[int], bool] = _holds_none,
    ) -> None:
        self.worker = worker
        self.queue = queue
        self.wakeup = wakeup
        # Set by the fetcher once a claim came back: LISTEN waits for it, so
        # that under a tight connection limit the claims get a connection first.
        self.reached = reached
        self.conninfo = conninfo
        self.holds = holds
        # Whether LISTEN is in place, so that cancels arrive by notification:
        # written here (on the event loop), read by the lease keeper, which
        # beats every second while it is False.
        self.listening = False
        # Set here whenever `listening` changes, or a control notification
        # names a job held here, or none ("*"); waited on by the lease keeper
        # (its only waiter), which then looks for cancels at once.
        self.look_now = Wakeup()
        self._stop = threading.Event()
        # When the LISTEN connection last answered (time.monotonic()):
        # written by the thread, read by `_watch` on the event loop.
        self._answered = 0.0
        # Control notifications that named no jobs: written and read by the thread.
        self._odd_notes = 0

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
                finally:
                    self._heard(False)
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
            tg.start_soon(self._watch, started)
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
        # A notification sent while (re)connecting is lost: look now (the
        # lease keeper, told, looks for cancels).
        self.wakeup.set()
        self._heard(True)

    async def _watch(self, started: anyio.Event) -> None:
        """While connected: a connection that stopped answering its round
        trips is not listening (and listening again once it answers)."""
        await started.wait()
        while True:
            await anyio.sleep(PING_INTERVAL)
            self._heard(monotonic() - self._answered < SILENT_AFTER)

    def _heard(self, listening: bool) -> None:
        if listening != self.listening:
            self.listening = listening
            self.look_now.set()

    def _hint(self, ids: list[int] | None) -> None:
        """(On the event loop.) A control notification: a look for cancels if
        it may concern a job held here. Never a cancel by itself."""
        if ids is None or any(self.holds(job_id) for job_id in ids):
            self.look_now.set()

    def _listen(
        self,
        conninfo: str,
        kwargs: dict[str, Any],
        token: anyio.lowlevel.EventLoopToken,
        started: anyio.Event,
    ) -> None:
        """(In a thread.) Connect, LISTEN, and at each notification wake the
        fetcher, or, on the control channel, hint the lease keeper."""
        channels = self.queue.channels
        with psycopg.Connection.connect(conninfo, **connection_kwargs(conninfo, kwargs)) as conn:
            # The queue's channel last: its LISTEN is what pg_stat_activity
            # shows of this connection, as before the control channel existed.
            conn.execute(channels.listen_control)
            conn.execute(channels.listen)
            self._answered = monotonic()
            call_soon(token, started.set)
            while not self._stop.is_set():
                if monotonic() - self._answered >= PING_INTERVAL:
                    # The round trip: LISTEN again (a no-op, and what
                    # pg_stat_activity keeps showing). It blocks while the
                    # connection is silent (see `_watch`); notifications
                    # meanwhile wait for the next notifies().
                    conn.execute(channels.listen)
                    self._answered = monotonic()
                for note in conn.notifies(timeout=0.5, stop_after=1):
                    if note.channel != channels.control:
                        call_soon(token, self.wakeup.set)
                        continue
                    try:
                        ids = cancelled_ids(note.payload)
                    except ValueError:
                        # Anyone may send one: warned of once, so that a
                        # flood of them cannot flood the log.
                        level = logging.DEBUG if self._odd_notes else logging.WARNING
                        self._odd_notes += 1
                        log.log(level, "worker %s: a control notification that names no jobs "
                                "ignored: %.80r", self.worker, note.payload)  # fmt: skip
                        continue
                    call_soon(token, functools.partial(self._hint, ids))
