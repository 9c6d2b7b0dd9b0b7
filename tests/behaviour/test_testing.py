"""`pgqueue.testing` against the real server, on sync, asyncio and trio.

`Helpers` calls the sync helpers (``drain``, ``enqueued`` ...) on the sync
`Queue` from a worker thread, and the async ones (``adrain``, ``aenqueued``
...) on an `AsyncQueue`, so that each test is written once.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import anyio.to_thread
import pytest

import pgqueue
from pgqueue import testing
from pgqueue.testing import Drained

from ..conftest import Raw

pytestmark = pytest.mark.anyio


class Helpers:
    """The testing helpers of the backend under test, awaitable."""

    def __init__(self, backend: str, queue: Any) -> None:
        self.backend = backend
        self.q = queue.sync if backend == "sync" else queue

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.backend == "sync":
            fn = getattr(testing, name)
            return await anyio.to_thread.run_sync(functools.partial(fn, self.q, *args, **kwargs))
        return await getattr(testing, "a" + name)(self.q, *args, **kwargs)

    async def drain(self, handlers: Any = None, **options: Any) -> Drained:
        drained: Drained = await self._call("drain", handlers, **options)
        return drained

    async def enqueued(self, *args: Any, **kwargs: Any) -> list[pgqueue.Job]:
        jobs: list[pgqueue.Job] = await self._call("enqueued", *args, **kwargs)
        return jobs

    async def assert_enqueued(self, *args: Any, **kwargs: Any) -> list[pgqueue.Job]:
        jobs: list[pgqueue.Job] = await self._call("assert_enqueued", *args, **kwargs)
        return jobs

    async def assert_not_enqueued(self, *args: Any, **kwargs: Any) -> None:
        await self._call("assert_not_enqueued", *args, **kwargs)

    def handler(self, fn: Any) -> Any:
        """``fn(job, queue)`` as a handler of this backend: a plain function on
        sync, an ``async def`` (awaiting what ``fn`` returns, if anything) on
        the async backends; ``queue`` is the queue under test."""
        if self.backend == "sync":
            return lambda job: fn(job, self.q)

        async def run(job: pgqueue.Job) -> Any:
            value = fn(job, self.q)
            return await value if hasattr(value, "__await__") else value

        return run


@pytest.fixture
def helpers(backend: str, queue: Any) -> Helpers:
    return Helpers(backend, queue)


async def test_enqueued_matches_kind_payload_by_containment_and_queue(
    queue: Any, helpers: Helpers
) -> None:
    a = await queue.enqueue("send_receipt", {"order_id": 42, "resend": False})
    b = await queue.enqueue("send_receipt", {"order_id": 43}, queue="mail")
    c = await queue.enqueue("resize", {"order_id": 42})

    assert [j.id for j in await helpers.enqueued()] == [a, b, c]
    assert [j.id for j in await helpers.enqueued("send_receipt")] == [a, b]
    assert [j.id for j in await helpers.enqueued(payload={"order_id": 42})] == [a, c]
    assert [j.id for j in await helpers.enqueued("send_receipt", queue="mail")] == [b]
    assert await helpers.enqueued("send_receipt", payload={"order_id": 44}) == []


async def test_enqueued_leaves_out_running_and_dead_jobs(queue: Any, helpers: Helpers) -> None:
    await queue.enqueue("a", max_attempts=1)
    (job,) = await queue.claim(1, worker="w")
    assert await helpers.enqueued() == []
    await queue.fail(job, "boom")
    assert await helpers.enqueued() == []


async def test_assert_enqueued_lists_what_is_enqueued_on_a_near_miss(
    queue: Any, helpers: Helpers
) -> None:
    await queue.enqueue("send_receipt", {"order_id": 43})

    with pytest.raises(AssertionError) as failed:
        await helpers.assert_enqueued("send_receipt", payload={"order_id": 42})

    message = str(failed.value)
    assert "expected a job of kind 'send_receipt'" in message
    assert '{"order_id":42}' in message
    assert "send_receipt" in message and '{"order_id":43}' in message


async def test_assert_enqueued_counts_and_returns_the_jobs(queue: Any, helpers: Helpers) -> None:
    ids = [await queue.enqueue("ping", {"n": n}) for n in range(2)]

    jobs = await helpers.assert_enqueued("ping", count=2)

    assert [j.id for j in jobs] == ids
    with pytest.raises(AssertionError, match="expected 3 job"):
        await helpers.assert_enqueued("ping", count=3)


async def test_assert_not_enqueued_names_the_job_it_found(queue: Any, helpers: Helpers) -> None:
    await helpers.assert_not_enqueued("ping")
    job_id = await queue.enqueue("ping", {"n": 1})

    with pytest.raises(AssertionError, match=f"{job_id} ping"):
        await helpers.assert_not_enqueued("ping")
    await helpers.assert_not_enqueued("ping", payload={"n": 2})


async def test_drain_runs_the_jobs_and_those_they_enqueue(queue: Any, helpers: Helpers) -> None:
    seen: list[tuple[str, Any]] = []

    def ship(job: pgqueue.Job, q: Any) -> Any:
        seen.append((job.kind, job.payload))
        return q.enqueue("notify", {"order_id": job.payload["order_id"]})

    def notify(job: pgqueue.Job, q: Any) -> None:
        assert pgqueue.job_context().job.id == job.id
        seen.append((job.kind, job.payload))

    first = await queue.enqueue("ship", {"order_id": 7})

    handlers = {"ship": helpers.handler(ship), "notify": helpers.handler(notify)}
    drained = await helpers.drain(handlers)

    assert seen == [("ship", {"order_id": 7}), ("notify", {"order_id": 7})]
    assert drained.succeeded[0] == first and len(drained.succeeded) == 2
    assert drained.failed == drained.dead == drained.cancelled == []
    assert await helpers.enqueued() == []


async def test_drain_retries_a_failed_job_at_once(queue: Any, helpers: Helpers) -> None:
    runs: list[int] = []

    def flaky(job: pgqueue.Job, q: Any) -> None:
        runs.append(job.attempts)
        if job.attempts < 3:
            raise RuntimeError(f"attempt {job.attempts}")

    job_id = await queue.enqueue("flaky", max_attempts=3)

    drained = await helpers.drain({"flaky": helpers.handler(flaky)})

    assert runs == [1, 2, 3]
    assert drained.failed == [job_id, job_id]
    assert drained.succeeded == [job_id]
    assert await queue.get(job_id) is None


async def test_drain_lists_a_job_that_failed_every_attempt_as_dead(
    queue: Any, helpers: Helpers, raw: Raw
) -> None:
    def broken(job: pgqueue.Job, q: Any) -> None:
        raise ValueError("no such order")

    job_id = await queue.enqueue("broken", max_attempts=2)

    drained = await helpers.drain({"broken": helpers.handler(broken)})

    assert drained.failed == [job_id] and drained.dead == [job_id]
    assert drained.succeeded == []
    job = await queue.get(job_id)
    assert job.status is pgqueue.JobStatus.DEAD
    assert job.last_error.startswith("ValueError: no such order")


async def test_drain_fails_a_job_without_a_handler_with_a_clear_error(
    queue: Any, helpers: Helpers
) -> None:
    job_id = await queue.enqueue("unknown", max_attempts=1)

    drained = await helpers.drain({})

    assert drained.dead == [job_id]
    job = await queue.get(job_id)
    assert "no handler for job kind 'unknown'" in job.last_error


async def test_drain_leaves_future_jobs_unless_with_scheduled(queue: Any, helpers: Helpers) -> None:
    later = await queue.enqueue("later", delay=timedelta(hours=1))
    ran: list[int] = []
    handlers = {"later": helpers.handler(lambda job, q: ran.append(job.id))}

    assert (await helpers.drain(handlers)).succeeded == []
    assert ran == []

    drained = await helpers.drain(handlers, with_scheduled=True)

    assert drained.succeeded == [later] and ran == [later]


async def test_drain_keeps_to_the_queues_given(queue: Any, helpers: Helpers) -> None:
    mail = await queue.enqueue("job", queue="mail")
    other = await queue.enqueue("job", queue="reports")
    handlers = {"job": helpers.handler(lambda job, q: None)}

    assert (await helpers.drain(handlers, queues=["mail"])).succeeded == [mail]
    assert [j.id for j in await helpers.enqueued()] == [other]


async def test_drain_keeps_the_result_of_a_job_with_result_ttl(
    queue: Any, helpers: Helpers
) -> None:
    job_id = await queue.enqueue("total", {"n": 2}, result_ttl=timedelta(minutes=5))

    await helpers.drain({"total": helpers.handler(lambda job, q: {"total": job.payload["n"] * 3})})

    result = await queue.result(job_id)
    assert result.outcome == "succeeded" and result.value == {"total": 6}


async def test_drain_runs_the_queues_tasks_when_given_no_handlers(
    backend: str, helpers: Helpers
) -> None:
    totals: list[int] = []

    def add(a: int, b: int) -> None:
        totals.append(a + b)

    task = helpers.q.task(kind="math.add")(add)
    if backend == "sync":
        await anyio.to_thread.run_sync(functools.partial(task.enqueue, 1, b=2))
    else:
        await task.enqueue(1, b=2)

    drained = await helpers.drain()

    assert totals == [3] and len(drained.succeeded) == 1


async def test_helpers_refuse_the_other_kind_of_queue(backend: str, helpers: Helpers) -> None:
    other = testing.adrain if backend == "sync" else testing.drain
    with pytest.raises(TypeError, match="expected a pgqueue"):
        result = other(helpers.q)
        if hasattr(result, "__await__"):
            await result


async def test_helpers_see_and_run_the_jobs_of_the_callers_transaction(
    queue: Any, helpers: Helpers, business: Any
) -> None:
    ran: list[int] = []
    handlers = {"in_tx": helpers.handler(lambda job, q: ran.append(job.id))}

    async with business.transaction() as conn:
        job_id = await queue.enqueue("in_tx", conn=conn)
        assert await helpers.enqueued() == []  # not committed: no one else sees it
        await helpers.assert_enqueued("in_tx", conn=conn)

        drained = await helpers.drain(handlers, conn=conn)

        assert drained.succeeded == [job_id] and ran == [job_id]
        await helpers.assert_not_enqueued(conn=conn)


async def test_drain_lists_a_job_cancelled_while_it_ran(queue: Any, helpers: Helpers) -> None:
    def cancels_itself(job: pgqueue.Job, q: Any) -> Any:
        async def cancel_then_fail() -> None:
            await q.cancel(job.id)
            raise RuntimeError("stopped")

        if helpers.backend != "sync":
            return cancel_then_fail()
        q.cancel(job.id)
        raise RuntimeError("stopped")

    job_id = await queue.enqueue("long", max_attempts=3)

    drained = await helpers.drain({"long": helpers.handler(cancels_itself)})

    assert drained.cancelled == [job_id]
    assert drained.failed == drained.dead == drained.succeeded == []
    assert await queue.get(job_id) is None


async def test_drain_stops_handlers_that_enqueue_jobs_forever(queue: Any, helpers: Helpers) -> None:
    def again(job: pgqueue.Job, q: Any) -> Any:
        return q.enqueue("again")

    await queue.enqueue("again")

    with pytest.raises(RuntimeError, match="enqueue jobs forever"):
        await helpers.drain({"again": helpers.handler(again)}, max_runs=5)
