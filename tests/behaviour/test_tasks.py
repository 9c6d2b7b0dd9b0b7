"""Tasks against the real server, on sync, asyncio and trio: `Queue.task`, `AsyncQueue.task`.

A task is made on the backend's own queue (the sync `Queue` for the sync
backend) and its enqueue calls are awaited here whatever the backend, as
`tests.backends.SyncAsAsync` does for the queue.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

import pgqueue
from pgqueue import JobStatus
from pgqueue.cli.worker import with_overrides

from ..backends import WorkerUnderTest
from ..conftest import Raw

pytestmark = pytest.mark.anyio


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


class TaskUnderTest:
    """A task of the queue under test, its enqueue calls awaitable whatever the backend."""

    def __init__(self, backend: str, task: Any) -> None:
        self.backend = backend
        self.task = task

    @classmethod
    def make(cls, backend: str, queue: Any, fn: Any, /, **defaults: Any) -> TaskUnderTest:
        target = queue.sync if backend == "sync" else queue
        return cls(backend, target.task(**defaults)(fn))

    @property
    def kind(self) -> str:
        return str(self.task.kind)

    def options(self, **options: Any) -> TaskUnderTest:
        return TaskUnderTest(self.backend, self.task.options(**options))

    async def _call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        if self.backend == "sync":
            return await anyio.to_thread.run_sync(functools.partial(method, *args, **kwargs))
        return await method(*args, **kwargs)

    async def enqueue(self, *args: Any, **kwargs: Any) -> int:
        return int(await self._call(self.task.enqueue, *args, **kwargs))

    async def enqueue_many(self, calls: Any) -> list[int]:
        return list(await self._call(self.task.enqueue_many, calls))


# -- the one promise, for tasks -----------------------------------------------------


async def test_task_enqueued_in_a_rolled_back_transaction_leaves_no_job(
    queue: Any, business: Any, raw: Raw, backend: str
) -> None:
    def send_receipt(order_id: int) -> None: ...

    task = TaskUnderTest.make(backend, queue, send_receipt)
    with pytest.raises(Rollback):
        async with business.transaction() as conn:
            [(order_id,)] = await business.execute(
                "INSERT INTO {orders} (item) VALUES ('book') RETURNING id"
            )
            job_id = await task.options(conn=conn).enqueue(order_id)
            assert await queue.get(job_id) is None  # not visible outside the transaction
            raise Rollback

    assert await business.execute("SELECT count(*) FROM {orders}") == [(0,)]
    assert raw.count() == 0


async def test_task_enqueued_in_a_committed_transaction_keeps_its_call_as_the_payload(
    queue: Any, business: Any, raw: Raw, backend: str
) -> None:
    def send_receipt(order_id: int, *, resend: bool = False) -> None: ...

    task = TaskUnderTest.make(backend, queue, send_receipt)
    async with business.transaction() as conn:
        [(order_id,)] = await business.execute(
            "INSERT INTO {orders} (item) VALUES ('book') RETURNING id"
        )
        calls = [(order_id,), {"order_id": order_id, "resend": True}]
        ids = await task.options(conn=conn).enqueue_many(calls)

    jobs = [await queue.get(i) for i in ids]
    assert [(j.kind, j.payload, j.status) for j in jobs] == [
        (task.kind, {"args": [order_id], "kwargs": {}}, JobStatus.PENDING),
        (
            task.kind,
            {"args": [], "kwargs": {"order_id": order_id, "resend": True}},
            JobStatus.PENDING,
        ),
    ]
    assert task.kind.endswith("send_receipt")


# -- a worker runs the queue's tasks ------------------------------------------------


async def test_worker_given_no_handlers_runs_plain_and_async_tasks_with_their_arguments(
    queue: Any, raw: Raw, backend: str
) -> None:
    calls: list[tuple[str, Any]] = []

    def plain(order_id: int, note: str = "-", *, tags: list[str]) -> None:
        calls.append(("plain", (order_id, note, tags)))

    async def coroutine(items: dict[str, int], *more: int) -> None:
        await anyio.lowlevel.checkpoint()
        calls.append(("async", (items, more)))

    plain_task = TaskUnderTest.make(backend, queue, plain, kind="plain")
    async_task = TaskUnderTest.make(backend, queue, coroutine, kind="coroutine")
    await plain_task.enqueue(1, tags=["a", "b"])
    await plain_task.enqueue(order_id=2, note="gift", tags=[])
    await async_task.enqueue({"x": 1}, 4, 5)

    await WorkerUnderTest(backend, queue, {}).run(until_empty=True)

    assert sorted(calls, key=repr) == sorted(
        [
            ("plain", (1, "-", ["a", "b"])),
            ("plain", (2, "gift", [])),
            ("async", ({"x": 1}, (4, 5))),
        ],
        key=repr,
    )
    assert raw.count() == 0


async def test_worker_runs_tasks_beside_the_handlers_it_is_given(
    queue: Any, raw: Raw, backend: str
) -> None:
    seen: list[Any] = []
    task = TaskUnderTest.make(backend, queue, lambda n: seen.append(("task", n)), kind="t")
    await task.enqueue(7)
    await queue.enqueue("h", {"n": 8})

    handlers = {"h": lambda job: seen.append(("handler", job.payload["n"]))}
    await WorkerUnderTest(backend, queue, handlers).run(until_empty=True)

    assert sorted(seen) == [("handler", 8), ("task", 7)]
    assert raw.count() == 0


async def test_a_worker_copied_with_other_settings_runs_the_tasks_still(
    queue: Any, raw: Raw, backend: str
) -> None:
    # What ``pgqueue worker app:worker --concurrency 2`` does with the worker it loads.
    seen: list[Any] = []

    async def coroutine(n: int) -> None:
        seen.append(("async", n))

    TaskUnderTest.make(backend, queue, lambda n: seen.append(("plain", n)), kind="p")
    task = TaskUnderTest.make(backend, queue, coroutine, kind="a")
    await task.enqueue(1)
    await queue.enqueue("p", {"args": [2]})
    loaded = WorkerUnderTest(backend, queue, {})

    copy = with_overrides(loaded.worker, dsn=None, concurrency=2, kinds=None)
    assert copy is not loaded.worker and copy.settings.concurrency == 2
    loaded.worker = copy
    await loaded.run(until_empty=True)

    assert sorted(seen) == [("async", 1), ("plain", 2)]
    assert raw.count() == 0


async def test_a_worker_refuses_a_handler_for_a_kind_that_is_a_task(
    queue: Any, backend: str
) -> None:
    TaskUnderTest.make(backend, queue, lambda: None, kind="t")
    with pytest.raises(ValueError, match="job kind 't' has a handler and is a task"):
        WorkerUnderTest(backend, queue, {"t": lambda job: None})


async def test_a_tasks_return_value_is_its_jobs_result(queue: Any, backend: str) -> None:
    async def total(prices: list[float]) -> float:
        await anyio.lowlevel.checkpoint()
        return sum(prices)

    task = TaskUnderTest.make(backend, queue, total, result_ttl=timedelta(minutes=5))
    job_id = await task.enqueue([1.5, 2.5])
    await WorkerUnderTest(backend, queue, {}).run(until_empty=True)
    assert await queue.wait(job_id, timeout=30) == 4.0


async def test_a_task_that_raises_fails_its_job_as_a_handler_does(
    queue: Any, raw: Raw, backend: str
) -> None:
    def broken(order_id: int) -> None:
        raise RuntimeError(f"no order {order_id}")

    task = TaskUnderTest.make(backend, queue, broken, max_attempts=1)
    job_id = await task.enqueue(9)
    await WorkerUnderTest(backend, queue, {}).run(until_empty=True)

    job = await queue.get(job_id)
    assert job.status is JobStatus.DEAD
    assert job.last_error.startswith("RuntimeError: no order 9")


async def test_a_job_of_a_tasks_kind_that_is_not_a_call_fails_clearly(
    queue: Any, backend: str
) -> None:
    TaskUnderTest.make(backend, queue, lambda order_id: None, kind="t")
    job_id = await queue.enqueue("t", {"order_id": 1}, max_attempts=1)
    await WorkerUnderTest(backend, queue, {}).run(until_empty=True)

    job = await queue.get(job_id)
    assert job.status is JobStatus.DEAD
    assert job.last_error.startswith("TaskCallError: job")
    assert "not a call of the task" in job.last_error


# -- options ------------------------------------------------------------------------


async def test_the_decorators_and_the_calls_options_reach_the_job(queue: Any, backend: str) -> None:
    def report(day: str) -> None: ...

    task = TaskUnderTest.make(backend, queue, report, queue="reports", priority=5,
                              max_attempts=7)  # fmt: skip
    plain_id = await task.enqueue("2026-01-01")
    later = datetime.now(UTC) + timedelta(days=1)
    urgent_id = await task.options(priority=50, run_at=later).enqueue("2026-01-02")
    again_id = await task.enqueue("2026-01-03")  # options() left the task alone

    plain, urgent, again = [await queue.get(i) for i in (plain_id, urgent_id, again_id)]
    assert (plain.queue, plain.priority, plain.max_attempts) == ("reports", 5, 7)
    assert (urgent.queue, urgent.priority, urgent.max_attempts) == ("reports", 50, 7)
    assert urgent.run_at == later
    assert (again.priority, again.run_at < later) == (5, True)


async def test_a_unique_key_function_of_the_arguments_makes_one_job_per_key(
    queue: Any, raw: Raw, backend: str
) -> None:
    def refresh(account: int, *, force: bool = False) -> None: ...

    task = TaskUnderTest.make(backend, queue, refresh,
                              unique_key=lambda account, **_: f"refresh:{account}")  # fmt: skip
    first = await task.enqueue(1)
    assert await task.enqueue(1, force=True) == first
    other = await task.enqueue(2)
    assert other != first
    assert raw.count() == 2


# -- bad input writes nothing --------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((), {}, TypeError, "missing a required argument: 'order_id'"),
        ((1,), {"colour": "red"}, TypeError, "unexpected keyword argument 'colour'"),
        ((1, 2, 3), {}, TypeError, "too many positional arguments"),
        ((datetime.now(UTC),), {}, TypeError, "argument order_id is a datetime"),
        ((1,), {"note": {1: "x"}}, TypeError, r"argument note has the key 1 \(int\)"),
        ((float("inf"),), {}, ValueError, "argument order_id is inf"),
    ],
)
async def test_bad_arguments_are_refused_at_enqueue_and_write_nothing(
    queue: Any,
    business: Any,
    raw: Raw,
    backend: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    def send_receipt(order_id: int, note: Any = None) -> None: ...

    task = TaskUnderTest.make(backend, queue, send_receipt)
    with pytest.raises(error, match=message):
        await task.enqueue(*args, **kwargs)
    # The same call, last of a batch: none of the batch is written.
    call = {**dict(zip(["order_id", "note"], args, strict=False)), **kwargs} if kwargs else args
    async with business.transaction() as conn:
        with pytest.raises(error, match=message):
            await task.options(conn=conn).enqueue_many([(1,), (2,), call])
    assert raw.count() == 0


async def test_bad_job_options_are_refused_before_anything_is_written(
    queue: Any, raw: Raw, backend: str
) -> None:
    def send_receipt(order_id: int) -> None: ...

    with pytest.raises(ValueError, match="priority must be from -100 to 100"):
        TaskUnderTest.make(backend, queue, send_receipt, priority=500)
    task = TaskUnderTest.make(backend, queue, send_receipt)
    with pytest.raises(TypeError, match="unknown job option 'order_id'"):
        task.options(order_id=1)
    with pytest.raises(ValueError, match="max_attempts must be at least 1"):
        task.options(max_attempts=0)
    keyed = task.options(unique_key=lambda order_id: "")
    with pytest.raises(ValueError, match="unique_key must not be empty"):
        await keyed.enqueue(1)
    assert raw.count() == 0


async def test_calling_a_task_runs_its_function_and_writes_no_job(
    queue: Any, raw: Raw, backend: str
) -> None:
    def double(n: int) -> int:
        return 2 * n

    async def triple(n: int) -> int:
        return 3 * n

    assert TaskUnderTest.make(backend, queue, double).task(4) == 8
    assert await TaskUnderTest.make(backend, queue, triple).task(4) == 12
    assert raw.count() == 0


async def test_a_second_function_for_a_kind_of_the_queue_is_refused(
    queue: Any, backend: str
) -> None:
    TaskUnderTest.make(backend, queue, lambda: None, kind="t")
    with pytest.raises(ValueError, match="has a task of kind 't' already"):
        TaskUnderTest.make(backend, queue, lambda: 1, kind="t")


def test_tasks_are_public_names() -> None:
    assert pgqueue.Task.__name__ == "Task" and pgqueue.AsyncTask.__name__ == "AsyncTask"


async def test_a_task_takes_depends_on_per_call_and_not_as_a_default(
    queue: Any, backend: str
) -> None:
    def step(n: int) -> None: ...

    task = TaskUnderTest.make(backend, queue, step)
    first = await task.enqueue(1)
    second = await task.options(depends_on=[first]).enqueue(2)
    job = await queue.get(second)
    assert job.status is pgqueue.JobStatus.WAITING
    assert job.parents == {first: None}
    target = queue.sync if backend == "sync" else queue
    with pytest.raises(TypeError, match="depends_on is given per call"):
        target.task(kind="other", depends_on=[first])(step)
    with pytest.raises(TypeError, match="depends_on"):
        task.options(depends_on="1")
