"""Counting below the database: how counts read up to a cap become totals,
each marked exact, at least, or about (`pgqueue.core.queue.counts`).
``tests/behaviour/test_counts.py`` counts real tables."""

from __future__ import annotations

import json

from pgqueue.core.jobs import ROW_STATUSES, JobStatus
from pgqueue.core.queue.counts import Count, Tally, _estimates, _plan_rows, capped, counted_by
from pgqueue.core.schema.predicates import INDEXES
from pgqueue.core.sql import Statements

PENDING, RUNNING, DEAD = JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DEAD


def test_a_count_says_whether_it_is_exact_at_least_or_about() -> None:
    assert Count(3).exact and str(Count(1234)) == "1,234"
    assert not capped(10_001, 10_000).exact and str(capped(10_001, 10_000)) == "10,000+"
    assert capped(10_000, 10_000).exact
    assert str(Count(2_345_678, estimated=True)) == "≈ 2.3M"
    assert Count(2) + Count(3) == Count(5)
    assert Count(2) + Count(4, capped=True) == Count(6, capped=True)


def test_one_status_past_the_cap_gets_what_the_others_leave_of_the_planners_rows() -> None:
    read = {PENDING: Count(100, capped=True), RUNNING: Count(7), DEAD: Count(3)}
    totals = _estimates(read, {PENDING: 1.0}, planned=10_000_010)
    assert totals == {
        PENDING: Count(10_000_000, estimated=True),
        RUNNING: Count(7),
        DEAD: Count(3),
    }
    assert list(totals) == [PENDING, RUNNING, DEAD]


def test_statuses_past_the_cap_share_the_rest_by_the_planners_estimate_of_each() -> None:
    read = {PENDING: Count(100, capped=True), RUNNING: Count(10), DEAD: Count(100, capped=True)}
    totals = _estimates(read, {PENDING: 3.0, DEAD: 1.0}, planned=4010)
    assert totals[PENDING] == Count(3000, estimated=True)
    assert totals[DEAD] == Count(1000, estimated=True)


def test_an_estimate_is_never_below_what_was_read() -> None:
    read = {PENDING: Count(100, capped=True), RUNNING: Count(0), DEAD: Count(0)}
    # Statistics from an empty table: the count stays "at least 100".
    assert _estimates(read, {PENDING: 1.0}, planned=0)[PENDING] == Count(100, capped=True)


def test_every_row_status_is_counted_through_an_index_of_the_table() -> None:
    predicates = {index.predicate for index in INDEXES}
    for status in ROW_STATUSES:
        for counted in counted_by(status):
            if counted.order is not None:
                assert counted.predicate in predicates, status
    statements = Statements("jobs").inspect
    for status in ROW_STATUSES:
        assert status.value in statements.status_estimates
        for counted in counted_by(status):
            assert counted.predicate.encode() in statements.counted


def test_the_planners_rows_are_read_from_explain_json_as_text_or_parsed() -> None:
    plan = [{"Plan": {"Node Type": "Seq Scan", "Plan Rows": 1234}}]
    assert _plan_rows([(plan,)]) == 1234
    assert _plan_rows([(json.dumps(plan),)]) == 1234


def test_a_tally_names_the_statuses_that_are_not_exact() -> None:
    tally = Tally(
        exact=False,
        totals={PENDING: Count(5, estimated=True), RUNNING: Count(1), DEAD: Count(4, capped=True)},
        groups=[],
        oldest_ready=None,
        expired=Count(0),
        table_rows=Count(10, estimated=True),
    )
    assert tally.estimated() == {PENDING, DEAD}
