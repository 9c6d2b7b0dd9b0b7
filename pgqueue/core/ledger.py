"""A worker's own bookkeeping: where each job it holds stands, in one table.

The database knows a job as ``running``; the worker that claimed it knows
more: whether a runner has begun it, whether its outcome is decided,
whether that outcome is on its way to the database. Every component of
the worker asks this ledger, and only the ledger changes a job's phase,
along `MOVES`; anything else raises `IllegalMove`. No I/O: the worker's
components perform what the answers imply.

    >>> ledger = Ledger()
    >>> ledger.claim([job])                 # doctest: +SKIP
    >>> ledger.next_unstarted() is job      # doctest: +SKIP
    >>> ledger.start(job.id)                # doctest: +SKIP
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from .jobs import Job

__all__ = ["MOVES", "IllegalMove", "Ledger", "Move", "Phase"]

O = TypeVar("O")  # noqa: E741 - an outcome, as the worker describes it


class Phase(enum.StrEnum):  # str-hashed: looked up several times per job
    """Where a job this worker holds stands. The last two are terminal: the
    job leaves the ledger."""

    CLAIMED = "claimed"  # claimed, waiting for a runner
    HELD = "held"  # an orphaned job, waiting to run alone
    RUNNING = "running"  # a runner has it
    LOST = "lost"  # running, but the database says this worker no longer holds it
    DONE = "done"  # its outcome is decided and waits to be written
    WRITING = "writing"  # its outcome is in a statement in flight
    RECORDED = "recorded"  # its outcome is written (or the database refused it)
    FORGOTTEN = "forgotten"  # its lease was lost; nothing of it will be written


class Move(enum.StrEnum):
    """What happens to a job: a runner begins it (START); it is kept back to
    run alone (HOLD) until its turn (UNHOLD); its outcome is decided
    (FINISH), also when it is given back or cancelled unstarted (RELEASE);
    the outcome goes into a statement (WRITE), which fails (UNWRITE) or
    returns (RECORD); or the database says the lease is gone (LOSE)."""

    START = enum.auto()
    HOLD = enum.auto()
    UNHOLD = enum.auto()
    FINISH = enum.auto()
    RELEASE = enum.auto()
    WRITE = enum.auto()
    UNWRITE = enum.auto()
    RECORD = enum.auto()
    LOSE = enum.auto()


_C, _H, _R, _L = Phase.CLAIMED, Phase.HELD, Phase.RUNNING, Phase.LOST
_D, _W, _REC, _F = Phase.DONE, Phase.WRITING, Phase.RECORDED, Phase.FORGOTTEN

# Every legal move: (phase, move) -> next phase, by the phase it leaves.
MOVES: Final[dict[tuple[Phase, Move], Phase]] = {
    (_C, Move.START): _R, (_C, Move.HOLD): _H, (_C, Move.RELEASE): _D, (_C, Move.LOSE): _F,
    (_H, Move.UNHOLD): _C, (_H, Move.RELEASE): _D, (_H, Move.LOSE): _F,
    (_R, Move.FINISH): _D, (_R, Move.LOSE): _L,
    (_L, Move.FINISH): _F,
    (_D, Move.WRITE): _W,
    (_W, Move.UNWRITE): _D, (_W, Move.RECORD): _REC,
}  # fmt: skip

# The same table by move, for the worker's hot path (a few moves per job).
_NEXT: Final[dict[Move, dict[Phase, Phase]]] = {
    move: {p: t for (p, m), t in MOVES.items() if m is move} for move in Move
}

TERMINAL: Final = frozenset({_REC, _F})
# The phases whose lease the worker keeps alive: it still means to run them.
LEASED: Final = frozenset({_C, _H, _R})


class IllegalMove(Exception):
    """A move that the job's phase does not allow (a bug in the worker)."""

    def __init__(self, job_id: int, phase: Phase | None, move: Move) -> None:
        where = phase.value if phase is not None else "unknown"
        super().__init__(f"job {job_id}: a {where} job cannot {move.value}")
        self.phase = phase
        self.move = move


@dataclass(slots=True)
class _Entry(Generic[O]):
    job: Job
    phase: Phase
    outcome: O | None = None


class Ledger(Generic[O]):
    """Every job one worker run holds, with its phase and, once decided, its outcome.

    Owned by the worker's event loop: every method is called from it, by
    the component the docstring names; none awaits.
    """

    def __init__(self) -> None:
        self._entries: dict[int, _Entry[O]] = {}
        self._unstarted: deque[int] = deque()  # CLAIMED, in claim order (lazily pruned)
        self._done: list[int] = []  # DONE, in the order decided (lazily pruned)
        self._counts: dict[Phase, int] = dict.fromkeys(Phase, 0)

    # -- moves ---------------------------------------------------------------------

    def _move(self, job_id: int, move: Move) -> _Entry[O]:
        entry = self._entries.get(job_id)
        target = _NEXT[move].get(entry.phase) if entry is not None else None
        if entry is None or target is None:
            raise IllegalMove(job_id, entry.phase if entry is not None else None, move)
        counts = self._counts
        counts[entry.phase] -= 1
        entry.phase = target
        if target is _REC or target is _F:
            del self._entries[job_id]
        else:
            counts[target] += 1
        return entry

    def claim(self, jobs: Iterable[Job]) -> None:
        """(Fetcher.) Jobs a claim returned, ready for runners in this order."""
        for job in jobs:
            if job.id in self._entries:
                raise IllegalMove(job.id, self._entries[job.id].phase, Move.START)
            self._entries[job.id] = _Entry(job, _C)
            self._counts[_C] += 1
            self._unstarted.append(job.id)

    def next_unstarted(self) -> Job | None:
        """(Runners.) The first claimed job no runner has, or None; it stays
        CLAIMED until `start`."""
        while self._unstarted:
            entry = self._entries.get(self._unstarted[0])
            if entry is not None and entry.phase is _C:
                return entry.job
            self._unstarted.popleft()
        return None

    def start_next(self) -> Job | None:
        """(Runners.) Begin the first claimed job no runner has; None if there is none."""
        job = self.next_unstarted()
        if job is not None:
            self._move(job.id, Move.START)
            self._unstarted.popleft()
        return job

    def start(self, job_id: int) -> Job:
        """(Runners.) A runner begins the job."""
        entry = self._move(job_id, Move.START)
        if self._unstarted and self._unstarted[0] == job_id:
            self._unstarted.popleft()
        return entry.job

    def hold(self, job_id: int) -> None:
        """(Fetcher.) Keep a claimed orphan back until it can run alone."""
        self._move(job_id, Move.HOLD)

    def unhold(self, job_id: int) -> None:
        """(Fetcher.) A held orphan's turn has come: the next job for the runners."""
        self._move(job_id, Move.UNHOLD)
        self._unstarted.appendleft(job_id)

    def finish(self, job_id: int, outcome: O) -> bool:
        """(Runners.) The job's outcome is decided; False if its lease was lost
        meanwhile (the outcome is dropped: nothing would be written)."""
        entry = self._move(job_id, Move.FINISH)
        if entry.phase is _F:
            return False
        entry.outcome = outcome
        self._done.append(job_id)
        return True

    def release(self, job_id: int, outcome_for: Callable[[Job], O]) -> Job:
        """(Completer, for the runners.) Decide the outcome of one claimed or
        held job no runner has begun (its cancel was requested): it will never
        start."""
        entry = self._move(job_id, Move.RELEASE)
        entry.outcome = outcome_for(entry.job)
        self._done.append(job_id)
        return entry.job

    def release_unstarted(self, outcome_for: Callable[[Job], O]) -> list[Job]:
        """(Shutdown.) Give back every claimed or held job no runner has begun."""
        released = []
        for entry in list(self._entries.values()):
            if entry.phase in (_C, _H):
                self._move(entry.job.id, Move.RELEASE)
                entry.outcome = outcome_for(entry.job)
                self._done.append(entry.job.id)
                released.append(entry.job)
        self._unstarted.clear()
        return released

    def take_done(self) -> list[tuple[Job, O]]:
        """(Completer.) Every decided outcome, now WRITING, in the order decided."""
        taken = []
        entries, write = self._entries, _NEXT[Move.WRITE]
        for job_id in self._done:
            entry = entries.get(job_id)
            if entry is not None and entry.phase is _D:
                entry.phase = write[_D]
                assert entry.outcome is not None
                taken.append((entry.job, entry.outcome))
        self._counts[_D] -= len(taken)
        self._counts[_W] += len(taken)
        self._done.clear()
        return taken

    def unwrite(self, job_ids: Iterable[int]) -> None:
        """(Completer.) The statement failed: those outcomes wait to be written again."""
        ids = list(job_ids)
        for job_id in ids:
            self._move(job_id, Move.UNWRITE)
        self._done[:0] = ids

    def recorded(self, job_ids: Iterable[int]) -> None:
        """(Completer.) The statement carrying those outcomes returned."""
        entries, record = self._entries, _NEXT[Move.RECORD]
        for job_id in job_ids:
            entry = entries.pop(job_id, None)
            if entry is None or entry.phase not in record:
                if entry is not None:
                    entries[job_id] = entry
                raise IllegalMove(job_id, entry.phase if entry else None, Move.RECORD)
            self._counts[entry.phase] -= 1
            entry.phase = record[entry.phase]

    def lose(self, job_ids: Iterable[int]) -> list[Job]:
        """(Lease keeper.) The database says this worker no longer holds these
        jobs; those still leased here are lost (returned). Others have moved on
        since the heartbeat was sent, and are left alone."""
        lost = []
        for job_id in job_ids:
            entry = self._entries.get(job_id)
            if entry is not None and entry.phase in LEASED:
                lost.append(entry.job)
                self._move(job_id, Move.LOSE)
        return lost

    # -- questions ---------------------------------------------------------------

    def held(self, jobs: Iterable[Job]) -> list[Job]:
        """Those of ``jobs`` this ledger holds (in any phase)."""
        entries = self._entries
        return [job for job in jobs if job.id in entries]

    def phase(self, job_id: int) -> Phase | None:
        entry = self._entries.get(job_id)
        return entry.phase if entry is not None else None

    def count(self, *phases: Phase) -> int:
        return sum(self._counts[p] for p in phases)

    @property
    def unstarted(self) -> int:
        return self._counts[_C]

    def leased(self) -> list[Job]:
        """(Lease keeper.) The jobs whose lease the worker keeps alive."""
        return [e.job for e in self._entries.values() if e.phase in LEASED]

    def holds(self, job_id: int) -> bool:
        """(Notifier.) Whether the worker keeps this job's lease alive."""
        entry = self._entries.get(job_id)
        return entry is not None and entry.phase in LEASED

    def jobs(self, *phases: Phase) -> list[Job]:
        return [e.job for e in self._entries.values() if e.phase in phases]

    def busy(self) -> bool:
        """Whether anything is claimed, held, running or unwritten."""
        return bool(self._entries)

    def outcomes_pending(self) -> bool:
        """Whether any outcome is decided but not yet written."""
        return bool(self._counts[_D] or self._counts[_W])

    def __len__(self) -> int:
        return len(self._entries)
