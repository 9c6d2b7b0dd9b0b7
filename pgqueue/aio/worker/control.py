"""`RunControl`: a worker's current run, as its controls reach it from any thread.

`AsyncWorker.stop` may come from a handler's thread, another task, another
thread or a signal; the run it stops lives on one event loop. This is the
one place that knows which run is current and how to reach its loop.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
from collections.abc import Callable

import anyio
import anyio.lowlevel

from .crew import Crew
from .flags import call_soon

__all__ = ["RunControl"]

log = logging.getLogger("pgqueue.worker")


class RunControl:
    """The current run's crew and event loop, and whether a stop was asked.

    ``crew`` and the loop are written by `begin` and `end` (the run itself);
    ``stopping`` by `stop` (any thread) and `end`. A stop before a run
    stops that run at once.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.stopping = False
        self.crew: Crew | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._loop_thread: int | None = None

    def begin(self, crew: Crew) -> None:
        """(The run, on its event loop.) ``crew`` is the current run."""
        if self.crew is not None:
            raise RuntimeError(f"worker {self.name} is already running")
        self._token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        self.crew = crew
        if self.stopping:
            crew.stop()

    def end(self) -> None:
        """(The run.) It is over, and has spent the stop that ended it."""
        self.crew = self._token = None
        self.stopping = False

    def stop(self) -> None:
        """Stop the current run gracefully, or the next one at once."""
        self.stopping = True
        self._on_loop(lambda crew: crew.stop())

    def _on_loop(self, action: Callable[[Crew], None]) -> None:
        crew, token = self.crew, self._token
        if crew is None or token is None:
            return
        if threading.get_ident() == self._loop_thread:
            action(crew)
        else:
            # Without waiting: a run that ends meanwhile never runs it, and
            # a caller waiting for that would wait forever.
            call_soon(token, functools.partial(action, crew))

    async def on_signals(self, crew: Crew) -> None:
        """(The run, from the main thread.) SIGINT or SIGTERM stops gracefully;
        a second one interrupts the running jobs."""
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if self.stopping:
                    log.warning(
                        "worker %s: %s again, not waiting for running jobs", self.name, name
                    )
                    crew.abort()
                else:
                    log.info("worker %s: %s, stopping gracefully", self.name, name)
                    self.stop()
