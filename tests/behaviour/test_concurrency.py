"""`concurrency=N` runs N handlers at once, on sync, asyncio and trio (SPEC §6).

Plain handlers (they run in worker threads on every backend) meet at a
`threading.Barrier`: its parties pass only if that many handlers run at
the same time, so a worker that runs fewer breaks it after the test's
patience, and the job fails. Counts and orders, never timings.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import anyio.to_thread
import psycopg_pool
import pytest

import pgqueue
from pgqueue import JobSpec

from ..backends import QUEUE_OPTIONS, WorkerUnderTest
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# Generous: a deadline for "it happened at all", never a performance claim.
PATIENCE = 20


class Meeting:
    """Handlers that each wait for ``parties`` of them to run at once; it
    counts those that met and the most that ran at once."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=PATIENCE)
        self.met = 0
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, job: pgqueue.Job) -> None:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            self.barrier.wait()
        finally:
            with self._lock:
                self.running -= 1
        with self._lock:
            self.met += 1


async def test_four_blocking_jobs_run_at_once_at_concurrency_four(
    queue: Any, raw: Raw, backend: str
) -> None:
    meeting = Meeting(4)
    await queue.enqueue_many([JobSpec("block", i, max_attempts=1) for i in range(4)])
    worker = WorkerUnderTest(backend, queue, {"block": meeting}, concurrency=4)
    await worker.run(until_empty=True)
    assert meeting.met == 4
    assert raw.count() == 0


async def test_eight_blocking_jobs_run_four_at_a_time_at_concurrency_four(
    queue: Any, raw: Raw, backend: str
) -> None:
    meeting = Meeting(4)
    await queue.enqueue_many([JobSpec("block", i, max_attempts=1) for i in range(8)])
    worker = WorkerUnderTest(backend, queue, {"block": meeting}, concurrency=4)
    await worker.run(until_empty=True)
    assert (meeting.met, meeting.most) == (8, 4)
    assert raw.count() == 0


async def test_quick_jobs_claimed_behind_a_long_one_finish_while_it_runs(
    queue: Any, raw: Raw, backend: str
) -> None:
    quick_done = threading.Event()
    finished: list[str] = []
    lock = threading.Lock()

    def long(job: pgqueue.Job) -> None:
        # Returns once every quick job is done: only if they ran beside it.
        if not quick_done.wait(PATIENCE):
            raise RuntimeError("the quick jobs waited behind this one")
        finished.append("long")

    def quick(job: pgqueue.Job) -> None:
        with lock:
            finished.append("quick")
            if finished.count("quick") == 12:
                quick_done.set()

    # Claimed in one batch, the long one first.
    await queue.enqueue("long", max_attempts=1)
    await queue.enqueue_many([JobSpec("quick", i) for i in range(12)])
    worker = WorkerUnderTest(backend, queue, {"long": long, "quick": quick}, concurrency=4)
    await worker.run(until_empty=True)
    assert finished == ["quick"] * 12 + ["long"]
    assert raw.count() == 0


async def test_a_limit_of_n_runs_n_jobs_of_its_key_at_once_and_never_more(
    queue: Any, raw: Raw, backend: str
) -> None:
    # Jobs meet in pairs: each pair passes only with both slots of the key
    # in use at once, and a freed slot must be taken again for the next.
    await queue.set_limit("tenant:1", 2)
    meeting = Meeting(2)
    await queue.enqueue_many(
        [JobSpec("call", i, limit_key="tenant:1", max_attempts=1) for i in range(8)]
    )
    workers = [WorkerUnderTest(backend, queue, {"call": meeting}, concurrency=4) for _ in range(3)]
    async with anyio.create_task_group() as tg:
        for worker in workers:
            tg.start_soon(worker.run)
        with anyio.fail_after(PATIENCE * 4):
            while raw.count() > 0:  # noqa: ASYNC110 - the condition lives in the database
                await anyio.sleep(0.05)
        for worker in workers:
            worker.stop()
    assert (meeting.met, meeting.most) == (8, 2)


async def test_two_workers_share_blocking_jobs_rather_than_one_holding_them_all(
    queue: Any, raw: Raw, backend: str
) -> None:
    # Eight jobs meet at once only if both workers of concurrency 4 run
    # four: a worker claims one job per free runner, and (once its handlers
    # show they take longer than a claim) no more. First at start-up, then
    # once each worker has run such jobs.
    meetings: list[Meeting] = []

    def block(job: pgqueue.Job) -> None:
        meetings[-1](job)
        threading.Event().wait(0.5)  # the work: a blocking call of half a second

    workers = [WorkerUnderTest(backend, queue, {"block": block}, concurrency=4) for _ in range(2)]
    async with anyio.create_task_group() as tg:
        for worker in workers:
            tg.start_soon(worker.run)
        try:
            for _ in range(2):
                meetings.append(Meeting(8))
                await queue.enqueue_many([JobSpec("block", i, max_attempts=1) for i in range(8)])
                with anyio.fail_after(PATIENCE * 2):
                    while raw.count("status <> 'dead'") > 0:  # noqa: ASYNC110 - in the database
                        await anyio.sleep(0.05)
        finally:
            for worker in workers:
                worker.stop()
    assert [(m.met, m.most) for m in meetings] == [(8, 8), (8, 8)]


async def test_a_sync_queue_made_inside_an_event_loop_is_served_by_a_sync_worker(
    dsn: str, table: str, raw: Raw
) -> None:
    # Made here, inside the running asyncio or trio program; the worker
    # runs on an event loop of its own, in a thread: nothing of this loop
    # may reach that one.
    handled: list[int] = []
    pool = psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=4, open=False)
    await anyio.to_thread.run_sync(pool.open)
    try:
        queue = pgqueue.Queue(pool, table=table, **QUEUE_OPTIONS)
        await anyio.to_thread.run_sync(queue.install)
        ids = await anyio.to_thread.run_sync(queue.enqueue_many, [("add", i) for i in range(3)])
        worker = pgqueue.Worker(queue, {"add": lambda job: handled.append(job.id)},
                                handle_signals=False)  # fmt: skip
        with anyio.fail_after(PATIENCE):
            await anyio.to_thread.run_sync(lambda: worker.run(until_empty=True))
        assert sorted(handled) == ids
        assert raw.count() == 0
    finally:
        await anyio.to_thread.run_sync(pool.close)
