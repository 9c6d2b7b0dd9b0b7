"""`Pace`: how many jobs a worker holds beyond one per runner. No database."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pgqueue.core.worker import HOLD_FOR, Pace


def test_nothing_is_held_beyond_the_runners_until_a_handler_has_run() -> None:
    assert Pace(concurrency=4, batch_size=100).ahead() == 0


def test_handlers_slower_than_the_hold_get_no_job_held_for_them() -> None:
    pace = Pace(concurrency=4, batch_size=100)
    pace.ran(1.0)
    assert pace.ahead() == 0


def test_handlers_quicker_than_a_claim_get_a_whole_batch() -> None:
    pace = Pace(concurrency=4, batch_size=100)
    pace.ran(0.000_01)
    assert pace.ahead() == 100


def test_in_between_the_runners_hold_what_they_finish_in_the_hold_time() -> None:
    pace = Pace(concurrency=16, batch_size=100)
    pace.ran(0.02)
    assert pace.ahead() == int(16 * HOLD_FOR / 0.02)


def test_slow_claims_hold_two_round_trips_of_work() -> None:
    pace = Pace(concurrency=16, batch_size=100, round_trip=0.05)
    pace.ran(0.02)
    # A claim as slow as the average leaves it where it is.
    pace.claimed(0.05)
    assert pace.ahead() == int(16 * 2 * 0.05 / 0.02)


def test_the_run_time_follows_a_change_of_handlers() -> None:
    pace = Pace(concurrency=4, batch_size=100)
    pace.ran(0.001)
    for _ in range(20):
        pace.ran(0.1)
    assert 0.09 < (pace.run_time or 0) <= 0.1
    assert pace.ahead() == 0


@given(
    st.integers(1, 64),
    st.integers(1, 500),
    st.lists(st.floats(0, 100), min_size=1, max_size=20),
    st.lists(st.floats(0, 10), max_size=20),
)
def test_ahead_is_within_zero_and_a_batch(
    concurrency: int, batch_size: int, runs: list[float], trips: list[float]
) -> None:
    pace = Pace(concurrency, batch_size)
    for seconds in runs:
        pace.ran(seconds)
    for seconds in trips:
        pace.claimed(seconds)
    assert 0 <= pace.ahead() <= batch_size


def test_slow_handlers_are_claimed_for_once_a_runner_is_free_one_each() -> None:
    pace = Pace(concurrency=4, batch_size=100)
    pace.ran(1.0)
    assert [pace.size(held, starved=False) for held in (4, 3, 0)] == [0, 1, 4]
    assert pace.size(0, starved=True) == 4  # ahead 0: nothing to double


def test_quick_handlers_are_claimed_for_in_whole_batches_at_half_a_batch() -> None:
    pace = Pace(concurrency=4, batch_size=100)
    pace.ran(0.000_01)
    assert pace.size(4 + 51, starved=False) == 0
    assert pace.size(4 + 50, starved=False) == 100
    assert pace.size(4 + 100 + 50, starved=True) == 100  # a second claim in flight


def test_a_cancelled_claim_halves_the_claims_from_its_own_size() -> None:
    pace = Pace(concurrency=4, batch_size=64)
    assert pace.cancelled(64) and pace.limit == 32
    assert pace.cancelled(64) and pace.limit == 32  # sent before: halved already
    assert pace.cancelled(32) and pace.limit == 16
    assert pace.cancelled(2) and pace.limit == 1
    assert not pace.cancelled(1)
    pace.ran(0.000_01)
    assert pace.size(0, starved=False) == 1


@given(
    concurrency=st.integers(1, 64),
    batch_size=st.integers(1, 500),
    run_time=st.one_of(st.none(), st.floats(0.000_001, 5.0)),
    unstarted=st.integers(0, 600),
)
def test_the_low_water_mark_is_where_a_busy_worker_claims(
    concurrency: int, batch_size: int, run_time: float | None, unstarted: int
) -> None:
    # Every runner busy, nothing coming: the runners wake the fetcher at the
    # low-water mark, and the fetcher claims exactly from there down, so no
    # wake-up is lost and none is wasted.
    pace = Pace(concurrency=concurrency, batch_size=batch_size)
    if run_time is not None:
        pace.ran(run_time)
    claims = pace.size(concurrency + unstarted, starved=False) > 0
    assert claims == (unstarted <= pace.low_water())


def test_the_low_water_mark_of_20_ms_handlers_on_16_runners() -> None:
    pace = Pace(concurrency=16, batch_size=100)
    pace.ran(0.02)
    assert (pace.ahead(), pace.low_water()) == (8, 4)  # claimed with 4 left, 8 ahead


@given(
    concurrency=st.integers(1, 64),
    batch_size=st.integers(1, 500),
    run_time=st.floats(0.000_001, 5.0),
    round_trip=st.floats(0.000_1, 0.1),
)
def test_claims_come_in_a_handful_of_sizes(
    concurrency: int, batch_size: int, run_time: float, round_trip: float
) -> None:
    # Each size is a statement of its own, planned until it is prepared.
    pace = Pace(concurrency=concurrency, batch_size=batch_size, round_trip=round_trip)
    pace.ran(run_time)
    sizes = {pace.size(held, starved) for held in range(0, 700) for starved in (False, True)}
    sizes.discard(0)
    shapes = {1 << n for n in range(10)} | {concurrency, batch_size}
    assert sizes <= shapes
    assert all(size <= batch_size for size in sizes)
