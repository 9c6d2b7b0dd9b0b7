"""Workflows below the database: `depends_on` validation, and the leaving
step that releases or cancels dependents, in every statement that ends
jobs (the behaviour is tests/behaviour/test_workflows.py)."""

from __future__ import annotations

from typing import Any

import pytest

from pgqueue import JobSpec
from pgqueue.core.queue.depends import follow_dependents
from pgqueue.core.queue.leaving import LEAVING_STEPS
from pgqueue.core.specs import validate_depends_on, validate_spec, validate_specs
from pgqueue.core.sql import Statements


def test_depends_on_is_a_list_of_ids_without_repeats() -> None:
    assert validate_depends_on(None) == ()
    assert validate_depends_on([]) == ()
    assert validate_depends_on([5, 2, 5]) == (5, 2)
    assert validate_depends_on((7,)) == (7,)
    assert validate_spec(JobSpec("k", depends_on=[3])).depends_on == (3,)
    assert validate_specs([JobSpec("k", depends_on=[4, 4])])[0].depends_on == (4,)


@pytest.mark.parametrize("bad", ["1", 1, {1}, [1.0], [True], [None], ["1"]])
def test_depends_on_that_is_not_a_list_of_ids_is_a_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match="depends_on"):
        validate_depends_on(bad)


@pytest.mark.parametrize("bad", [[0], [-3], [2**63]])
def test_depends_on_out_of_the_id_range_is_a_value_error(bad: Any) -> None:
    with pytest.raises(ValueError, match="depends_on"):
        validate_depends_on(bad)


def test_depends_on_with_a_unique_key_is_refused() -> None:
    with pytest.raises(ValueError, match="unique_key"):
        validate_spec(JobSpec("k", depends_on=[1], unique_key="u"))


def test_releasing_dependents_is_one_leaving_step_in_every_statement_that_ends_jobs() -> None:
    assert LEAVING_STEPS[-1] is follow_dependents
    statements = Statements("pgqueue_jobs", history=True)
    outcomes = statements.outcomes
    assert b"done_released" in outcomes.complete
    assert b"failed_rows_swept" in outcomes.record_failures
    assert b"cancelled_swept" in outcomes.record_failures
    assert b"cancelled_swept" in outcomes.cancel
    turn = statements.turn(True, True, True, 20)
    for cte in (b"done_released", b"failed_rows_swept", b"cancelled_swept"):
        assert cte in turn
    # A plain success has no dependents (its statement says so): no step.
    plain = statements.turn(False, False, False, 20, plain=True, failures=False)
    assert b"done_edges" not in plain
    assert b"dependents IS NULL" in plain
