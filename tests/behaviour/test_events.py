"""Job events on sync, asyncio and trio: what a worker tells its listeners, and when.

Handlers here are plain functions (they run in worker threads on every
backend); listeners are `Recorder`s, which keep every event and can signal
the test through a `threading.Event` once the events it waits for arrived.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anyio
import anyio.to_thread
import pytest

import pgqueue
from pgqueue import EventName, JobEvent

from ..backends import WorkerUnderTest, open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# Generous: a deadline for "it happened at all", never a performance claim.
PATIENCE = 20

CLAIMED, SUCCEEDED, FAILED, DEAD = (
    EventName.CLAIMED,
    EventName.SUCCEEDED,
    EventName.FAILED,
    EventName.DEAD,
)


class Recorder:
    """An event listener that keeps what it hears, and the threads it heard it on."""

    def __init__(self) -> None:
        self.events: list[JobEvent] = []
        self.threads: set[int] = set()
        self._waits: list[tuple[Callable[[Recorder], bool], threading.Event]] = []

    def __call__(self, event: JobEvent) -> None:
        self.events.append(event)
        self.threads.add(threading.get_ident())
        for condition, flag in self._waits:
            if condition(self):
                flag.set()

    def named(self, *names: EventName) -> list[JobEvent]:
        return [e for e in self.events if e.name in names]

    def when(self, condition: Callable[[Recorder], bool]) -> threading.Event:
        """A flag set once ``condition(self)`` holds after an event."""
        flag = threading.Event()
        self._waits.append((condition, flag))
        return flag


async def wait_for(flag: threading.Event) -> None:
    assert await anyio.to_thread.run_sync(flag.wait, PATIENCE)


def zero_backoff() -> pgqueue.Backoff:
    return pgqueue.Backoff(base=timedelta(0), jitter=0)


async def test_drain_reports_one_claimed_and_one_succeeded_event_per_job(
    queue: Any, backend: str, table: str
) -> None:
    heard = Recorder()
    ids = await queue.enqueue_many([("add" if i % 2 else "mail", {"n": i}) for i in range(120)])
    kinds = {job_id: ("add" if i % 2 else "mail") for i, job_id in enumerate(ids)}
    worker = WorkerUnderTest(backend, queue, {"add": lambda job: None, "mail": lambda job: None},
                             batch_size=25, on_event=heard)  # fmt: skip
    await worker.run(until_empty=True)

    succeeded = heard.named(SUCCEEDED)
    assert Counter(e.job_id for e in succeeded) == Counter(ids)
    assert {e.job_id: e.kind for e in succeeded} == kinds
    assert all(e.duration is not None and e.duration >= 0 for e in succeeded)
    assert {(e.worker, e.table, e.queue, e.priority, e.attempts, e.error) for e in succeeded} == {
        (worker.worker.name, table, "default", 0, 1, None)
    }
    claimed = heard.named(CLAIMED)
    assert Counter(e.job_id for e in claimed) == Counter(ids)
    assert {e.duration for e in claimed} == {None}
    assert len(heard.events) == 2 * len(ids)


async def test_events_carry_the_queue_and_priority_of_their_job(
    dsn: str, table: str, backend: str
) -> None:
    heard = Recorder()

    def broken(job: pgqueue.Job) -> None:
        raise ValueError("no")

    async with open_queue(backend, dsn, table=table, backoff=zero_backoff()) as q:
        await q.install()
        mail = await q.enqueue_many(
            [pgqueue.JobSpec("mail", i, queue="mail", priority=7) for i in range(3)]
        )
        bulk = await q.enqueue("mail", queue="bulk", priority=-100)
        broke = await q.enqueue("broken", queue="bulk", priority=100, max_attempts=1)
        worker = WorkerUnderTest(backend, q, {"mail": lambda job: None, "broken": broken},
                                 on_event=heard)  # fmt: skip
        await worker.run(until_empty=True)

    where = {job_id: ("mail", 7) for job_id in mail} | {bulk: ("bulk", -100), broke: ("bulk", 100)}
    assert {e.job_id: (e.queue, e.priority) for e in heard.named(CLAIMED)} == where
    assert {e.job_id: (e.queue, e.priority) for e in heard.named(SUCCEEDED, DEAD)} == where
    [dead] = heard.named(DEAD)
    assert (dead.job_id, dead.queue, dead.priority) == (broke, "bulk", 100)


async def test_failing_job_reports_failed_then_dead_with_its_error(
    dsn: str, table: str, backend: str
) -> None:
    heard = Recorder()

    def broken(job: pgqueue.Job) -> None:
        raise KeyError("no such order")

    async with open_queue(backend, dsn, table=table, backoff=zero_backoff()) as q:
        await q.install()
        job_id = await q.enqueue("broken", max_attempts=3)
        await WorkerUnderTest(backend, q, {"broken": broken}, on_event=heard).run(until_empty=True)

    outcomes = heard.named(FAILED, DEAD)
    assert [(e.name, e.attempts) for e in outcomes] == [(FAILED, 1), (FAILED, 2), (DEAD, 3)]
    assert {(e.job_id, e.kind, e.error) for e in outcomes} == {
        (job_id, "broken", "KeyError: 'no such order'")
    }
    assert all(e.duration is not None and e.duration >= 0 for e in outcomes)
    assert [e.attempts for e in heard.named(CLAIMED)] == [1, 2, 3]


async def test_job_without_a_handler_reports_dead_with_no_run_time(
    queue: Any, backend: str
) -> None:
    heard = Recorder()
    job_id = await queue.enqueue("orphan", max_attempts=1)
    await WorkerUnderTest(backend, queue, {"known": print}, on_event=heard).run(until_empty=True)
    [dead] = heard.named(DEAD)
    assert (dead.job_id, dead.kind, dead.duration) == (job_id, "orphan", None)
    assert dead.error is not None and "no handler for job kind 'orphan'" in dead.error


async def test_job_timeout_reports_the_timeout_as_its_error(queue: Any, backend: str) -> None:
    heard = Recorder()
    release = threading.Event()
    await queue.enqueue("slow", max_attempts=1)
    worker = WorkerUnderTest(backend, queue, {"slow": lambda job: release.wait(PATIENCE)},
                             job_timeout=0.3, on_event=heard)  # fmt: skip
    try:
        await worker.run(until_empty=True)
    finally:
        release.set()
    [dead] = heard.named(DEAD)
    assert dead.error == "TimeoutError: job_timeout of 0.3s exceeded"


async def test_listener_that_raises_is_logged_once_and_disturbs_nothing(
    queue: Any, raw: Raw, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: JobEvent) -> None:
        raise RuntimeError("metrics backend down")

    heard = Recorder()
    ids = await queue.enqueue_many([("add", i) for i in range(30)])
    worker = WorkerUnderTest(backend, queue, {"add": lambda job: None},
                             batch_size=10, on_event=[broken, heard])  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="pgqueue.worker"):
        await worker.run(until_empty=True)

    assert raw.count() == 0
    # The listener after the broken one heard everything.
    assert sorted(e.job_id for e in heard.named(SUCCEEDED)) == ids
    about_broken = [r for r in caplog.records if "broken" in r.getMessage()]
    first, summary = about_broken
    assert first.levelno == logging.ERROR and first.exc_info is not None
    assert "metrics backend down" in str(first.exc_info[1])
    assert summary.exc_info is None and f"raised {2 * len(ids)} times" in summary.getMessage()


async def test_listeners_run_in_order_on_one_thread_that_runs_no_handler(
    queue: Any, backend: str
) -> None:
    calls: list[tuple[str, int, int]] = []
    handler_threads: set[int] = set()

    def listener(tag: str) -> Callable[[JobEvent], None]:
        return lambda event: calls.append((tag, event.job_id, threading.get_ident()))

    await queue.enqueue_many([("add", i) for i in range(10)])
    worker = WorkerUnderTest(backend, queue,
                             {"add": lambda job: handler_threads.add(threading.get_ident())},
                             on_event=[listener("a"), listener("b")])  # fmt: skip
    added = worker.worker.add_event_listener(listener("c"))

    @worker.worker.add_event_listener  # type: ignore[untyped-decorator]
    def last(event: JobEvent) -> None:
        calls.append(("d", event.job_id, threading.get_ident()))

    await worker.run(until_empty=True)
    assert callable(added) and callable(last)
    assert len(calls) == 4 * 20  # claimed and succeeded, for 10 jobs, heard by 4 listeners
    for i in range(0, len(calls), 4):
        group = calls[i : i + 4]
        assert [tag for tag, _, _ in group] == ["a", "b", "c", "d"]
        assert len({job_id for _, job_id, _ in group}) == 1
    [loop_thread] = {thread for _, _, thread in calls}
    assert loop_thread not in handler_threads


async def test_stop_reports_released_for_jobs_never_started(
    queue: Any, raw: Raw, backend: str
) -> None:
    heard = Recorder()
    started, finish = threading.Event(), threading.Event()

    def block(job: pgqueue.Job) -> None:
        started.set()
        finish.wait(PATIENCE)

    # A quick job first: once its handlers ran quicker than a claim, a worker
    # claims a whole batch, not one job per runner (`Pace`).
    quick = await queue.enqueue("quick")
    ids = await queue.enqueue_many([("block", i) for i in range(10)])
    handlers = {"quick": lambda job: None, "block": block}
    worker = WorkerUnderTest(backend, queue, handlers, concurrency=1, batch_size=10,
                             on_event=heard)  # fmt: skip
    released = heard.when(lambda r: len(r.named(EventName.RELEASED)) == 9)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            await wait_for(started)
            worker.stop()
            await wait_for(released)
            # Told only once written: the rows are pending again, attempt given back.
            assert raw.count("status = 'pending' AND attempts = 0") == 9
            finish.set()
    finally:
        finish.set()
    events = heard.named(EventName.RELEASED)
    assert sorted(e.job_id for e in events) == ids[1:]
    assert {(e.kind, e.attempts, e.error, e.duration) for e in events} == {("block", 0, None, None)}
    assert [e.job_id for e in heard.named(SUCCEEDED)] == [quick, ids[0]]


async def test_job_still_running_after_the_grace_period_reports_interrupted(
    queue: Any, backend: str
) -> None:
    heard = Recorder()
    started, finish = threading.Event(), threading.Event()

    def stuck(job: pgqueue.Job) -> None:
        started.set()
        finish.wait(PATIENCE)

    job_id = await queue.enqueue("stuck")
    worker = WorkerUnderTest(backend, queue, {"stuck": stuck}, grace_period=0.2, on_event=heard)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            await wait_for(started)
            worker.stop()
    finally:
        finish.set()
    [event] = heard.named(EventName.INTERRUPTED)
    assert (event.job_id, event.kind, event.attempts) == (job_id, "stuck", 1)
    assert event.error is not None and "interrupted" in event.error
    assert (await queue.get(job_id)).status is pgqueue.JobStatus.PENDING


async def test_reaper_reports_reaped_and_buried_jobs_of_a_dead_worker(
    queue: Any, raw: Raw, backend: str
) -> None:
    heard = Recorder()
    comes_back = await queue.enqueue("work", max_attempts=3)
    last_try = await queue.enqueue("work", max_attempts=1)
    assert len(await queue.claim(10, worker="ghost")) == 2
    raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour'")

    worker = WorkerUnderTest(backend, queue, {"work": lambda job: None}, on_event=heard)
    done = heard.when(
        lambda r: bool(r.named(EventName.REAPED) and r.named(DEAD) and r.named(SUCCEEDED))
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_for(done)
        worker.stop()

    # The reaper reads ids only: it knows neither kind nor queue.
    [reaped] = heard.named(EventName.REAPED)
    assert (reaped.job_id, reaped.kind) == (comes_back, None)
    assert (reaped.queue, reaped.priority) == (None, None)
    [buried] = heard.named(DEAD)
    assert (buried.job_id, buried.kind) == (last_try, None)
    assert (buried.queue, buried.priority) == (None, None)
    # The reaped job came back and ran; the buried one stays dead.
    assert [e.job_id for e in heard.named(SUCCEEDED)] == [comes_back]
    assert raw.rows("SELECT id, status FROM {table}") == [(last_try, "dead")]


async def test_worker_refuses_what_cannot_be_an_event_listener(queue: Any, backend: str) -> None:
    async def not_plain(event: JobEvent) -> None: ...

    with pytest.raises(TypeError, match="callable"):
        WorkerUnderTest(backend, queue, {}, on_event=["not a function"])
    with pytest.raises(TypeError, match="callable"):
        WorkerUnderTest(backend, queue, {}, on_event=42)
    with pytest.raises(TypeError, match="plain function"):
        WorkerUnderTest(backend, queue, {}, on_event=not_plain)
    worker = WorkerUnderTest(backend, queue, {})
    with pytest.raises(TypeError, match="plain function"):
        worker.worker.add_event_listener(not_plain)
