"""`Chunk`: plain-function jobs that one worker thread runs one after another.

A thread hop costs more than a trivial handler; a few jobs share one.
"""

from __future__ import annotations

import threading

from ...core.jobs import Job

__all__ = ["Chunk", "Ran"]

Ran = tuple[Job, Exception | None, float | None]  # (job, its error or None, run time if timed)


class Chunk:
    """Plain-function jobs that one worker thread runs one after another.

    Shared by the event loop and one thread, under ``_lock``: the thread
    begins jobs (`start_next`) and appends to ``ran``; the loop may `cut` it.
    """

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = jobs
        self.ran: list[Ran] = []
        self._next = 0
        self._cut = False
        self._lock = threading.Lock()

    def start_next(self) -> Job | None:
        """(In the thread.) The next job to begin, or None when done or cut."""
        with self._lock:
            if self._cut or self._next == len(self.jobs):
                return None
            self._next += 1
            return self.jobs[self._next - 1]

    def cut(self) -> list[Job]:
        """(On the event loop.) Begin no more; return the jobs never begun, once."""
        with self._lock:
            if self._cut:
                return []
            self._cut = True
            return self.jobs[self._next :]

    def finish(self) -> tuple[list[Ran], list[Job], list[Job]]:
        """(On the event loop.) Cut the chunk and split it: the jobs that ran,
        the job begun but unfinished (abandoned), and the jobs never begun that
        `cut` has not handed out yet."""
        never_begun = self.cut()
        with self._lock:
            ran = list(self.ran)
            begun = self.jobs[len(ran) : self._next]
        return ran, begun, never_begun
