"""`Chunk`: plain-function jobs that one worker thread runs one after another.

A thread hop costs more than a trivial handler; a few jobs share one. A
runner with nothing else to do takes its share of the runs a chunk has
not begun (`split`) once they have waited behind one run long enough, so
that no job waits behind a slow handler while a runner is idle.
"""

from __future__ import annotations

import threading
from collections.abc import Container
from time import perf_counter

from ...core.context import JobContext
from ...core.jobs import Job

__all__ = ["Chunk", "Ran"]

# (the run, its error or None, its return value as JSON if kept, run time)
Ran = tuple[JobContext, Exception | None, str | None, float | None]


class Chunk:
    """Plain-function jobs that one worker thread runs one after another.

    Shared by the event loop and one thread (one hop at a time), under
    ``_lock``: the thread begins runs (`start_next`) and ends them
    (`ran_one`: an append, atomic without the lock); the loop takes the
    runs ended so far (`take_ran`: a slice, up to the length it read), and may
    `withdraw` a run not begun yet (its job was cancelled), `split` off a
    share of those not begun, or `cut` the rest.
    """

    def __init__(self, runs: list[JobContext]) -> None:
        self.runs = runs
        self._ran: list[Ran] = []  # appended by the thread (atomic without the lock)
        self._taken = 0  # _ran[:_taken] are taken by the loop (`take_ran`)
        self._next = 0  # runs[:_next] are begun (or withdrawn)
        self._current: JobContext | None = None  # the last begun: ended once in `_ran`
        self._withdrawn: set[int] = set()  # job ids never to begin
        self._cut = False
        # When the thread began its current run, or the chunk was made: how
        # long what is not begun has waited for it. Written under the lock
        # by `start_next`; read by the thread itself without it.
        self.since = perf_counter()
        self._lock = threading.Lock()

    def start_next(self, *, unless: Container[str] = ()) -> JobContext | None:
        """(In the thread.) The next run to begin; None when done or cut, or
        when the next run's kind is in ``unless`` (left for a later hop)."""
        with self._lock:
            while not self._cut and self._next < len(self.runs):
                run = self.runs[self._next]
                if unless and run.job.kind in unless:
                    return None
                self._next += 1
                if run.job.id not in self._withdrawn:
                    self._current = run
                    self.since = perf_counter()
                    return run
            return None

    def ran_one(self, ran: Ran) -> None:
        """(In the thread.) The run `start_next` returned has ended."""
        self._ran.append(ran)

    def take_ran(self, ended: int | None = None) -> list[Ran]:
        """(On the event loop.) The runs ended since the last take (up to the
        first ``ended`` runs, if given)."""
        taken, self._taken = self._taken, len(self._ran) if ended is None else ended
        return self._ran[taken : self._taken]

    def unbegun(self) -> int:
        """(On the event loop.) How many runs are not begun yet (withdrawn ones included)."""
        with self._lock:
            return 0 if self._cut else len(self.runs) - self._next

    def waiting(self) -> tuple[int, float]:
        """(On the event loop.) How many runs are not begun yet, and since when
        (`time.perf_counter`) they have waited behind the thread's current run."""
        with self._lock:
            return 0 if self._cut else len(self.runs) - self._next, self.since

    def split(self, ways: int = 2) -> list[JobContext]:
        """(On the event loop.) Take away the later ``1 / ways`` (rounded up)
        of the runs not begun yet, for another thread: this one never begins
        them. Withdrawn runs are dropped (their outcome is decided already)."""
        with self._lock:
            if self._cut:
                return []
            keep = len(self.runs) - -(-(len(self.runs) - self._next) // ways)
            taken = self.runs[keep:]
            del self.runs[keep:]
            withdrawn = self._withdrawn
            return [r for r in taken if r.job.id not in withdrawn]

    def withdraw(self, run: JobContext) -> bool:
        """(On the event loop.) Never begin ``run``; False if it has begun
        already (or the chunk was cut: its jobs are released)."""
        with self._lock:
            if self._cut or run.job.id in self._withdrawn or run not in self.runs[self._next :]:
                return False
            self._withdrawn.add(run.job.id)
            return True

    def cut(self) -> list[Job]:
        """(On the event loop.) Begin no more; return the jobs never begun (nor
        withdrawn), once."""
        with self._lock:
            if self._cut:
                return []
            self._cut = True
            withdrawn = self._withdrawn
            return [r.job for r in self.runs[self._next :] if r.job.id not in withdrawn]

    def finish(self) -> tuple[list[Ran], list[JobContext], list[Job]]:
        """(On the event loop.) Cut the chunk and split it: the runs that
        ended (not taken yet), the run begun but unfinished (abandoned), and
        the jobs never begun that `cut` has not handed out yet."""
        never_begun = self.cut()
        with self._lock:  # the thread begins nothing more; an abandoned one may still end one
            ended, current = len(self._ran), self._current
        last = self._ran[ended - 1][0] if ended else None
        ran = self.take_ran(ended)
        return ran, [] if current is None or current is last else [current], never_begun
