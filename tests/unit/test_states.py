"""Property tests of the pure job state machine, `pgqueue.core.states`.

No database here: the state machine is a table and a function, and these
tests check that table against the specification and that no sequence of
events can take a job anywhere the specification does not allow.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pgqueue import IllegalTransition, JobStatus
from pgqueue.core.states import (
    DELETED,
    TRANSITIONS,
    Event,
    State,
    is_exhausted,
    next_state,
)

P, R, D = JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DEAD
X = JobStatus.CANCELLED
# Where a job's life ends: its row is gone (succeeded, or cancelled).
TERMINAL: tuple[State, ...] = (DELETED, X)
ALL_STATES: tuple[State, ...] = (*JobStatus, DELETED)
ALL_EVENTS: tuple[Event, ...] = tuple(Event)

states = st.sampled_from(ALL_STATES)
events = st.sampled_from(ALL_EVENTS)
max_attempts_st = st.integers(min_value=1, max_value=50)


@st.composite
def attempts_and_max(draw: st.DrawFn) -> tuple[int, int]:
    max_attempts = draw(max_attempts_st)
    attempts = draw(st.integers(min_value=0, max_value=max_attempts + 5))
    return attempts, max_attempts


# -- the table itself ----------------------------------------------------------


def test_transition_table_is_exactly_the_specified_one() -> None:
    # SPEC §1: pending -> running (claim); running -> deleted (success);
    # running -> pending | dead (failure, lease expired); dead -> pending (retry);
    # and a claimed-but-unstarted job can be released. "Nothing else."
    # SPEC §5: a pending, running or dead job can be cancelled; cancelled is
    # an outcome (its row is deleted), never retried, reaped back or buried.
    assert TRANSITIONS == {
        (P, Event.CLAIM): (R,),
        (R, Event.SUCCEED): (DELETED,),
        (R, Event.FAIL): (P, D),
        (R, Event.EXPIRE): (P, D),
        (R, Event.RELEASE): (P,),
        (D, Event.RETRY): (P,),
        (P, Event.CANCEL): (X,),
        (R, Event.CANCEL): (X,),
        (D, Event.CANCEL): (X,),
    }


@given(states, events, attempts_and_max())
def test_every_pair_outside_the_table_raises_illegal_transition(
    state: State, event: Event, counts: tuple[int, int]
) -> None:
    assume((state, event) not in TRANSITIONS)
    attempts, max_attempts = counts
    with pytest.raises(IllegalTransition) as caught:
        next_state(state, event, attempts=attempts, max_attempts=max_attempts)
    assert caught.value.state is state
    assert caught.value.event is event
    assert state.value in str(caught.value)
    assert event.value in str(caught.value)


# Drawn from the table itself: filtering all pairs with assume() would
# throw most draws away (and trip hypothesis's health check).
@given(st.sampled_from(list(TRANSITIONS)), attempts_and_max())
def test_every_pair_in_the_table_lands_on_one_of_its_listed_targets(
    pair: tuple[State, Event], counts: tuple[int, int]
) -> None:
    state, event = pair
    attempts, max_attempts = counts
    result = next_state(state, event, attempts=attempts, max_attempts=max_attempts)
    assert result in TRANSITIONS[state, event]


@given(st.sampled_from(TERMINAL), events, attempts_and_max())
def test_deleted_and_cancelled_are_terminal_and_allow_no_event(
    state: State, event: Event, counts: tuple[int, int]
) -> None:
    attempts, max_attempts = counts
    with pytest.raises(IllegalTransition):
        next_state(state, event, attempts=attempts, max_attempts=max_attempts)


@given(states, attempts_and_max())
def test_cancel_ends_every_job_that_is_still_in_the_table_whatever_its_attempts(
    state: State, counts: tuple[int, int]
) -> None:
    attempts, max_attempts = counts
    if state in (P, R, D):
        assert next_state(state, Event.CANCEL, attempts=attempts, max_attempts=max_attempts) is X
    else:
        with pytest.raises(IllegalTransition):
            next_state(state, Event.CANCEL, attempts=attempts, max_attempts=max_attempts)


@given(states, attempts_and_max())
def test_retry_is_only_allowed_from_dead(state: State, counts: tuple[int, int]) -> None:
    attempts, max_attempts = counts
    if state is D:
        assert next_state(state, Event.RETRY, attempts=attempts, max_attempts=max_attempts) is P
    else:
        with pytest.raises(IllegalTransition):
            next_state(state, Event.RETRY, attempts=attempts, max_attempts=max_attempts)


@given(attempts_and_max())
def test_release_returns_a_running_job_to_pending_whatever_its_attempts(
    counts: tuple[int, int],
) -> None:
    attempts, max_attempts = counts
    assert next_state(R, Event.RELEASE, attempts=attempts, max_attempts=max_attempts) is P


@given(states)
def test_only_a_running_job_can_be_released(state: State) -> None:
    assume(state is not R)
    with pytest.raises(IllegalTransition):
        next_state(state, Event.RELEASE, attempts=1, max_attempts=3)


@given(st.sampled_from([Event.FAIL, Event.EXPIRE]), attempts_and_max())
def test_failure_or_expiry_at_max_attempts_buries_the_job_and_below_reschedules_it(
    event: Event, counts: tuple[int, int]
) -> None:
    attempts, max_attempts = counts
    result = next_state(R, event, attempts=attempts, max_attempts=max_attempts)
    if attempts >= max_attempts:
        assert result is D
    else:
        assert result is P


@given(attempts_and_max())
def test_is_exhausted_means_every_attempt_was_used(counts: tuple[int, int]) -> None:
    attempts, max_attempts = counts
    assert is_exhausted(attempts, max_attempts) is (attempts >= max_attempts)


# -- random lives of one job -----------------------------------------------------


@dataclass(frozen=True)
class ModelJob:
    """One job as the backends keep it: a state and its attempt counter."""

    state: State
    attempts: int
    max_attempts: int


def apply(job: ModelJob, event: Event) -> ModelJob:
    """What a backend does with an event: ask the state machine, then count attempts."""
    attempts = job.attempts
    if event is Event.CLAIM:
        # Attempts are counted at claim time, so the claimed attempt is judged.
        attempts += 1
    state = next_state(job.state, event, attempts=attempts, max_attempts=job.max_attempts)
    if event is Event.RELEASE:
        attempts -= 1  # the job never started: the attempt is given back
    elif event is Event.RETRY:
        attempts = 0  # an operator grants a fresh set of attempts
    return replace(job, state=state, attempts=attempts)


@given(st.lists(events, max_size=60))
def test_random_events_from_pending_never_reach_an_illegal_state(
    sequence: list[Event],
) -> None:
    state: State = P
    for event in sequence:
        try:
            new = next_state(state, event, attempts=1, max_attempts=2)
        except IllegalTransition:
            assert (state, event) not in TRANSITIONS
            continue
        assert (state, event) in TRANSITIONS
        assert new in TRANSITIONS[state, event]
        state = new
        assert state in ALL_STATES
        if state in TERMINAL:
            # Nothing follows success or a cancel: every later event is refused.
            for later in ALL_EVENTS:
                with pytest.raises(IllegalTransition):
                    next_state(state, later, attempts=1, max_attempts=2)
            break


@given(max_attempts_st, st.lists(events, max_size=80))
def test_attempts_never_exceed_max_attempts_unless_the_job_is_dead(
    max_attempts: int, sequence: list[Event]
) -> None:
    job = ModelJob(P, 0, max_attempts)
    for event in sequence:
        try:
            after = apply(job, event)
        except IllegalTransition:
            assert (job.state, event) not in TRANSITIONS
            continue
        if event in (Event.FAIL, Event.EXPIRE):
            # Judged at the attempt just used: the last one buries the job.
            expected = D if job.attempts == max_attempts else P
            assert after.state is expected
        if event is Event.RELEASE:
            assert after.state is P
            assert after.attempts == job.attempts - 1
        if event is Event.RETRY:
            assert job.state is D
            assert after == ModelJob(P, 0, max_attempts)
        if event is Event.CANCEL:
            # Cancelled from wherever it was, attempts left or not.
            assert job.state in (P, R, D)
            assert after.state is X
        job = after
        assert 0 <= job.attempts <= max_attempts
        if job.state is P:
            # A pending job always has an attempt left to claim.
            assert job.attempts < max_attempts
        elif job.state is R:
            assert job.attempts >= 1
        elif job.state is D:
            assert job.attempts == max_attempts
        else:
            assert job.state in TERMINAL
            break


@given(max_attempts_st)
def test_a_job_that_always_fails_is_claimed_exactly_max_attempts_times_then_dies(
    max_attempts: int,
) -> None:
    job = ModelJob(P, 0, max_attempts)
    claims = 0
    while job.state is P:
        job = apply(job, Event.CLAIM)
        claims += 1
        job = apply(job, Event.FAIL)
    assert claims == max_attempts
    assert job == ModelJob(D, max_attempts, max_attempts)
