"""Typed tasks against the real server, on sync, asyncio and trio: a dataclass
argument enqueued, stored as JSON, run decoded; a bad one writes nothing;
a stale payload fails its job naming the field."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import anyio.to_thread
import pytest

import pgqueue

from ..conftest import Raw
from .test_testing import Helpers

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Refund:
    order_id: int
    amount: Decimal
    at: datetime


REFUND = Refund(42, Decimal("9.90"), datetime(2026, 12, 4, 12, 0, tzinfo=UTC))


def make_task(helpers: Helpers, seen: list[Any]) -> Any:
    def refund(refund: Refund, *, note: str = "") -> None:
        seen.append((refund, note))

    return helpers.q.task(kind="shop.refund", max_attempts=1)(refund)


async def enqueue(backend: str, task: Any, *args: Any, **kwargs: Any) -> int:
    if backend == "sync":
        call = functools.partial(task.enqueue, *args, **kwargs)
        return int(await anyio.to_thread.run_sync(call))
    return int(await task.enqueue(*args, **kwargs))


@pytest.fixture
def helpers(backend: str, queue: Any) -> Helpers:
    return Helpers(backend, queue)


async def test_a_typed_argument_is_stored_as_json_and_runs_decoded(
    backend: str, helpers: Helpers, raw: Raw
) -> None:
    seen: list[Any] = []
    task = make_task(helpers, seen)

    job_id = await enqueue(backend, task, REFUND, note="late")

    stored = raw.one("SELECT payload FROM {table} WHERE id = %s", job_id)
    assert stored == {
        "args": [{"order_id": 42, "amount": "9.90", "at": "2026-12-04T12:00:00+00:00"}],
        "kwargs": {"note": "late"},
    }
    drained = await helpers.drain()
    assert drained.succeeded == [job_id] and seen == [(REFUND, "late")]


async def test_a_bad_typed_argument_raises_before_anything_is_written(
    backend: str, helpers: Helpers, raw: Raw
) -> None:
    task = make_task(helpers, [])

    with pytest.raises(TypeError, match="argument refund must be Refund, not dict"):
        await enqueue(backend, task, {"order_id": 42})

    assert raw.count() == 0


async def test_a_payload_that_no_longer_decodes_fails_its_job_naming_the_field(
    queue: Any, helpers: Helpers
) -> None:
    seen: list[Any] = []
    make_task(helpers, seen)
    # As an older release enqueued it: before ``amount`` was a Decimal.
    old = {"args": [{"order_id": 42, "amount": 9.9, "at": "2026-12-04T12:00:00+00:00"}]}
    job_id = await queue.enqueue("shop.refund", old, max_attempts=1)

    drained = await helpers.drain()

    assert drained.dead == [job_id] and seen == []
    job = await queue.get(job_id)
    assert job.status is pgqueue.JobStatus.DEAD
    assert job.last_error.startswith(
        f"PayloadMismatch: job {job_id} of task shop.refund: field refund.amount: "
        "expected Decimal text, got 9.9"
    )
