"""The job state machine: every legal transition in one table.

A job row is ``pending``, ``running`` or ``dead``; a succeeded job is
deleted, and so is a cancelled one (``cancelled`` is an outcome, never a
row). Anything not in `TRANSITIONS` is illegal and raises `IllegalTransition`.
Both backends ask this module what happens next and only then write it.
"""

from __future__ import annotations

import enum
from typing import Final

from .jobs import JobStatus

__all__ = [
    "DELETED",
    "TRANSITIONS",
    "Event",
    "IllegalTransition",
    "State",
    "Terminal",
    "is_exhausted",
    "next_state",
]


class Terminal(enum.Enum):
    """The state of a job whose row is gone: it succeeded."""

    DELETED = "deleted"


DELETED: Final = Terminal.DELETED
State = JobStatus | Terminal


class Event(enum.Enum):
    CLAIM = "claim"  # a worker takes a ready job; attempts += 1
    SUCCEED = "succeed"  # the handler returned
    FAIL = "fail"  # the handler raised, timed out, or has no handler
    EXPIRE = "expire"  # the lease ran out: the worker is presumed dead
    RELEASE = "release"  # the worker gives back a job it claimed but never started
    RETRY = "retry"  # an operator revives a dead job
    CANCEL = "cancel"  # someone cancels the job: it goes, and is never run again


_P, _R, _D = JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DEAD
_X = JobStatus.CANCELLED

# (state, event) -> the possible next states. Where there are two, the
# job's attempts decide (see `next_state`): a job that has used all its
# attempts is buried rather than rescheduled.
TRANSITIONS: Final[dict[tuple[State, Event], tuple[State, ...]]] = {
    (_P, Event.CLAIM): (_R,),
    (_R, Event.SUCCEED): (DELETED,),
    (_R, Event.FAIL): (_P, _D),
    (_R, Event.EXPIRE): (_P, _D),
    (_R, Event.RELEASE): (_P,),
    (_D, Event.RETRY): (_P,),
    # A cancelled job's row is deleted (recorded as cancelled in history and
    # results); a running one stops first, and whatever its worker then
    # reports, it is neither retried, nor reaped back, nor buried.
    (_P, Event.CANCEL): (_X,),
    (_R, Event.CANCEL): (_X,),
    (_D, Event.CANCEL): (_X,),
}


class IllegalTransition(Exception):
    """Raised for an event that the job's current state does not allow."""

    def __init__(self, state: State, event: Event) -> None:
        super().__init__(f"a {state.value} job cannot {event.value}")
        self.state = state
        self.event = event


def is_exhausted(attempts: int, max_attempts: int) -> bool:
    """True when a job has used every attempt it was given."""
    return attempts >= max_attempts


def next_state(state: State, event: Event, *, attempts: int, max_attempts: int) -> State:
    """The state after `event`, for a job that has been claimed `attempts` times."""
    try:
        targets = TRANSITIONS[state, event]
    except KeyError:
        raise IllegalTransition(state, event) from None
    if len(targets) == 1:
        return targets[0]
    retry, bury = targets
    return bury if is_exhausted(attempts, max_attempts) else retry
