"""Property tests of `pgqueue.Backoff` and of the failure decisions built on it.

No database here: `Backoff` turns an attempt count into a `timedelta`, and
`QueueCore.failure` decides what a failed, expired or released job becomes.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import pgqueue
from pgqueue import Backoff, Job, JobStatus
from pgqueue.core.ops import QueueCore
from pgqueue.core.states import Event

MICROSECOND = timedelta(microseconds=1)

# Realistic policies: up to an hour's base and a century's cap.
bases = st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=1))
caps = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=36500))
factors = st.floats(min_value=1.0, max_value=10.0, allow_nan=False)
jitters = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
# Small enough that base * factor ** attempts is computed without overflow.
attempts_st = st.integers(min_value=0, max_value=60)
huge_attempts = st.integers(min_value=0, max_value=10**12)


@st.composite
def backoffs(draw: st.DrawFn) -> Backoff:
    return Backoff(
        base=draw(bases),
        factor=draw(factors),
        cap=draw(caps),
        jitter=draw(jitters),
        rng=random.Random(draw(st.integers())),
    )


def raw_seconds(backoff: Backoff, attempts: int) -> float:
    """The un-jittered, uncapped delay of the policy's formula."""
    return backoff.base.total_seconds() * backoff.factor ** max(attempts, 0)


# -- Backoff.delay ----------------------------------------------------------------


@given(backoffs(), huge_attempts)
def test_delay_is_a_non_negative_timedelta_within_bounds_and_cap(
    backoff: Backoff, attempts: int
) -> None:
    delay = backoff.delay(attempts)
    low, high = backoff.bounds(attempts)
    assert isinstance(delay, timedelta)
    assert timedelta(0) <= low <= delay <= high <= backoff.cap


@given(backoffs(), attempts_st)
def test_delay_is_never_above_the_jittered_raw_delay(backoff: Backoff, attempts: int) -> None:
    raw = raw_seconds(backoff, attempts)
    delay = backoff.delay(attempts).total_seconds()
    # A timedelta is whole microseconds: allow one for rounding.
    assert delay <= raw * (1 + backoff.jitter) + 1e-6
    # ... and never below the raw delay unless the cap cuts it.
    assert delay >= min(raw, backoff.cap.total_seconds()) - 1e-6


@given(backoffs(), st.integers(min_value=-5, max_value=5000), st.integers(0, 5000))
def test_lower_bound_never_decreases_as_attempts_grow(
    backoff: Backoff, attempts: int, more: int
) -> None:
    assert backoff.bounds(attempts)[0] <= backoff.bounds(attempts + more)[0]


@given(backoffs(), st.integers(min_value=-(10**6), max_value=-1))
def test_negative_attempts_back_off_like_zero_attempts(backoff: Backoff, attempts: int) -> None:
    assert backoff.bounds(attempts) == backoff.bounds(0)


@given(st.integers(min_value=0, max_value=11))
def test_default_policy_without_jitter_waits_two_to_the_attempts_seconds(attempts: int) -> None:
    assert Backoff(jitter=0).delay(attempts) == timedelta(seconds=2**attempts)


@given(st.integers(min_value=12, max_value=10**6))
def test_default_policy_is_capped_at_one_hour(attempts: int) -> None:
    assert Backoff(jitter=0).delay(attempts) == timedelta(hours=1)
    assert Backoff(rng=random.Random(attempts)).delay(attempts) == timedelta(hours=1)


@given(st.integers(min_value=0, max_value=11), st.integers())
def test_default_policy_adds_at_most_ten_percent_jitter(attempts: int, seed: int) -> None:
    delay = Backoff(rng=random.Random(seed)).delay(attempts)
    exact = timedelta(seconds=2**attempts)
    assert exact <= delay <= min(exact * 1.1, timedelta(hours=1))


@given(backoffs(), attempts_st)
def test_without_jitter_the_delay_is_the_lower_bound(backoff: Backoff, attempts: int) -> None:
    policy = Backoff(base=backoff.base, factor=backoff.factor, cap=backoff.cap, jitter=0)
    low, high = policy.bounds(attempts)
    assert low == high == policy.delay(attempts)


@given(backoffs(), st.integers(min_value=10**3, max_value=10**18))
def test_huge_attempts_do_not_raise(backoff: Backoff, attempts: int) -> None:
    delay = backoff.delay(attempts)
    assert timedelta(0) <= delay <= backoff.cap


@given(st.integers(min_value=0, max_value=10**6))
def test_a_zero_base_with_a_small_factor_never_waits(attempts: int) -> None:
    # factor 1 keeps factor ** attempts finite; with factor 2, attempts >= 1024 overflow
    # and bounds() falls back to the cap even though base is zero.
    assert Backoff(base=timedelta(0), factor=1.0).delay(attempts) == timedelta(0)


bad_constructor_args = st.one_of(
    st.fixed_dictionaries(
        {"base": st.timedeltas(max_value=-MICROSECOND) | st.sampled_from([1, 1.5, None])}
    ),
    st.fixed_dictionaries(
        {"cap": st.timedeltas(max_value=-MICROSECOND) | st.sampled_from([3600, "1h", None])}
    ),
    st.fixed_dictionaries(
        {"factor": st.floats(max_value=1.0, exclude_max=True) | st.just(math.nan)}
    ),
    st.fixed_dictionaries(
        {
            "jitter": st.floats(max_value=0.0, exclude_max=True)
            | st.floats(min_value=1.0, exclude_min=True)
            | st.just(math.nan)
        }
    ),
)


@given(bad_constructor_args)
def test_invalid_policy_is_refused_with_value_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)


# -- QueueCore.failure ------------------------------------------------------------

NOW = datetime(2024, 1, 1, tzinfo=UTC)


def running_job(attempts: int, max_attempts: int, status: JobStatus = JobStatus.RUNNING) -> Job:
    return Job(
        id=17,
        kind="send_receipt",
        payload={"order_id": 1},
        attempts=attempts,
        max_attempts=max_attempts,
        status=status,
        run_at=NOW,
        last_error=None,
        locked_by="w1",
        locked_at=NOW,
        created_at=NOW,
    )


@st.composite
def claimed_counts(draw: st.DrawFn) -> tuple[int, int]:
    """(attempts, max_attempts) of a running job: at least one claim, at most max."""
    max_attempts = draw(st.integers(min_value=1, max_value=40))
    return draw(st.integers(min_value=1, max_value=max_attempts)), max_attempts


@given(claimed_counts())
def test_failure_below_max_attempts_reschedules_within_backoff_bounds(
    counts: tuple[int, int],
) -> None:
    attempts, max_attempts = counts
    assume(attempts < max_attempts)
    core = QueueCore("t")
    failure = core.failure(
        running_job(attempts, max_attempts), ValueError("boom"), event=Event.FAIL
    )
    low, high = core.backoff.bounds(attempts)
    assert failure.status is JobStatus.PENDING
    assert low <= failure.delay <= high
    assert failure.job_id == 17
    # The write is fenced by the attempt that failed, and keeps the count.
    assert failure.attempts == failure.new_attempts == attempts
    assert failure.error == "ValueError: boom"


@given(st.integers(min_value=1, max_value=40))
def test_failure_at_max_attempts_buries_the_job(max_attempts: int) -> None:
    failure = QueueCore("t").failure(
        running_job(max_attempts, max_attempts), "gave up", event=Event.FAIL
    )
    assert failure.status is JobStatus.DEAD
    assert failure.new_attempts == max_attempts
    assert failure.error == "gave up"


@given(claimed_counts(), st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=30)))
def test_retry_in_overrides_the_backoff(counts: tuple[int, int], retry_in: timedelta) -> None:
    attempts, max_attempts = counts
    failure = QueueCore("t").failure(
        running_job(attempts, max_attempts), "later", retry_in=retry_in, event=Event.FAIL
    )
    assert failure.delay == retry_in
    # retry_in changes when, never whether: the attempts still decide.
    expected = JobStatus.DEAD if attempts == max_attempts else JobStatus.PENDING
    assert failure.status is expected


@given(claimed_counts(), st.timedeltas(max_value=-MICROSECOND))
def test_negative_retry_in_is_refused(counts: tuple[int, int], retry_in: timedelta) -> None:
    attempts, max_attempts = counts
    with pytest.raises(ValueError):
        QueueCore("t").failure(
            running_job(attempts, max_attempts), "x", retry_in=retry_in, event=Event.FAIL
        )


@pytest.mark.parametrize("retry_in", [5, 1.5, "5 seconds"])
def test_retry_in_that_is_not_a_timedelta_is_refused(retry_in: Any) -> None:
    with pytest.raises(TypeError, match="timedelta"):
        QueueCore("t").failure(running_job(1, 3), "x", retry_in=retry_in, event=Event.FAIL)


@given(claimed_counts())
def test_release_gives_the_attempt_back_without_error_text(counts: tuple[int, int]) -> None:
    attempts, max_attempts = counts
    failure = QueueCore("t").failure(
        running_job(attempts, max_attempts), RuntimeError("shutting down"), event=Event.RELEASE
    )
    # Even a job on its last attempt is released, not buried: it never ran.
    assert failure.status is JobStatus.PENDING
    assert failure.attempts == attempts
    assert failure.new_attempts == attempts - 1
    assert failure.delay == timedelta(0)
    assert failure.error is None


@given(claimed_counts())
def test_expiry_is_ready_at_once_and_buried_only_at_max_attempts(counts: tuple[int, int]) -> None:
    attempts, max_attempts = counts
    failure = QueueCore("t").failure(
        running_job(attempts, max_attempts), "lease expired", event=Event.EXPIRE
    )
    expected = JobStatus.DEAD if attempts == max_attempts else JobStatus.PENDING
    assert failure.status is expected
    assert failure.delay == timedelta(0)
    assert failure.new_attempts == attempts
    assert failure.error == "lease expired"


@given(st.integers(min_value=0, max_value=11))
def test_failure_uses_the_queues_backoff_policy(attempts: int) -> None:
    core = QueueCore("t", backoff=Backoff(jitter=0))
    failure = core.failure(running_job(attempts, 20), "x", event=Event.FAIL)
    assert failure.delay == timedelta(seconds=2**attempts)


@given(
    st.sampled_from([JobStatus.PENDING, JobStatus.DEAD]),
    st.sampled_from([Event.FAIL, Event.EXPIRE, Event.RELEASE]),
)
def test_failure_of_a_job_that_is_not_running_is_an_illegal_transition(
    status: JobStatus, event: Event
) -> None:
    with pytest.raises(pgqueue.IllegalTransition):
        QueueCore("t").failure(running_job(1, 3, status=status), "x", event=event)


def test_failure_of_something_that_is_not_a_job_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        QueueCore("t").failure(17, "x", event=Event.FAIL)  # type: ignore[arg-type]
