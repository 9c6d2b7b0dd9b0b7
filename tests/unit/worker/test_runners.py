"""The runners against `FakeQueue`: plain jobs go to as many threads as there
are runners, and an idle runner takes the tail of a chunk held up by a slow job."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread
import pytest

import pgqueue
from pgqueue import JobStatus
from pgqueue.aio.worker.chunk import Chunk
from pgqueue.aio.worker.threads import STEAL_AFTER, WORTH_A_HOP, Threads
from pgqueue.core.context import JobContext
from pgqueue.core.ledger import Ledger
from pgqueue.core.worker import Handlers, WorkerSettings

from .fake import FakeQueue
from .test_components import PATIENCE, worker

pytestmark = pytest.mark.anyio


def contexts(n: int) -> list[JobContext]:
    now = datetime.now(UTC)
    return [
        JobContext(pgqueue.Job(i, "k", {}, 1, 3, JobStatus.RUNNING, now, None, "w", now, now), "w")
        for i in range(1, n + 1)
    ]


def plain_threads(*, jobs: int, concurrency: int) -> tuple[Threads, Ledger[Any]]:
    """`Threads` over a ledger that holds ``jobs`` claimed jobs of one plain
    kind, "k" (no completer: these tests only take and steal)."""
    handlers = Handlers()
    handlers.register("k")(lambda job: None)
    ledger: Ledger[Any] = Ledger()
    ledger.claim([context.job for context in contexts(jobs)])
    settings = WorkerSettings(concurrency=concurrency, batch_size=100)
    limiter = anyio.CapacityLimiter(concurrency)
    threads = Threads(settings, handlers, ledger, None, limiter, "t")  # type: ignore[arg-type]
    return threads, ledger


def test_split_takes_the_later_half_of_the_runs_not_begun_and_the_chunk_never_begins_them() -> None:
    runs = contexts(6)
    chunk = Chunk(list(runs))
    assert chunk.start_next() is runs[0]  # begun: never taken away
    assert chunk.withdraw(runs[5])  # cancelled: its outcome is decided already
    assert chunk.unbegun() == 5
    taken = chunk.split()
    assert taken == runs[3:5]  # the later half of runs 2-6 (rounded up), less the withdrawn
    assert [chunk.start_next(), chunk.start_next(), chunk.start_next()] == [*runs[1:3], None]
    assert chunk.split() == []  # nothing left to take


def test_runners_woken_together_each_take_a_part_of_a_chunks_tail_at_once() -> None:
    threads, _ = plain_threads(jobs=4, concurrency=4)
    threads._ran.add("k")  # known quick: the four in one chunk
    chunk = threads.take()
    assert len(chunk.runs) == 4
    assert chunk.start_next() is chunk.runs[0]  # its thread is on the first, which blocks
    # Its run just begun (set ahead, so that no pause of this test's makes it older):
    # nothing to take yet, and a look again when it has run STEAL_AFTER.
    chunk.since = time.perf_counter() + 60
    stolen, retry_in = threads.steal(3)
    assert stolen is None and retry_in is not None and retry_in > 60
    chunk.since = time.perf_counter() - STEAL_AFTER  # it has run that long
    # Three idle runners, woken together: one run each, none left behind the first.
    parts = [threads.steal(idle) for idle in (3, 2, 1)]
    assert [len(part.runs) for part, _ in parts if part is not None] == [1, 1, 1]
    assert chunk.unbegun() == 0


def test_split_of_a_cut_chunk_takes_nothing() -> None:
    runs = contexts(3)
    chunk = Chunk(list(runs))
    assert [job.id for job in chunk.cut()] == [1, 2, 3]
    assert chunk.split() == []
    assert chunk.unbegun() == 0


async def test_plain_jobs_fewer_than_a_batch_run_all_at_once() -> None:
    fake = FakeQueue()
    ids = fake.add(n=4)
    barrier = threading.Barrier(4, timeout=PATIENCE)  # passes only with all four running
    w = worker(fake, {"k": lambda job: barrier.wait()}, concurrency=4, batch_size=100)
    with anyio.fail_after(PATIENCE * 2):
        await w.run(until_empty=True)
    assert sorted(fake.succeeded) == ids


async def test_an_idle_runner_takes_the_jobs_queued_behind_a_slow_one_in_its_chunk() -> None:
    fake = FakeQueue()
    [slow] = fake.add("slow")
    quick = fake.add("quick", n=12)
    # Two runners: the first takes all thirteen in its chunk (its share of a
    # batch of 100), the slow one first; the second, idle, takes the later
    # half of what that chunk has not begun, and again, until none is left.
    quick_done = threading.Event()
    ran: list[int] = []

    def run_quick(job: pgqueue.Job) -> None:
        ran.append(job.id)
        if len(ran) == len(quick):
            quick_done.set()

    def run_slow(job: pgqueue.Job) -> Any:
        if not quick_done.wait(PATIENCE):
            raise RuntimeError("the quick jobs waited behind this one")

    w = worker(fake, {"slow": run_slow, "quick": run_quick}, concurrency=2, batch_size=100)
    with anyio.fail_after(PATIENCE * 2):
        await w.run(until_empty=True)
    assert sorted(ran) == quick
    assert sorted(fake.succeeded) == [slow, *quick]


async def test_a_freed_slot_is_taken_again_at_once_without_a_notification_or_a_poll() -> None:
    # No LISTEN (the fake refuses it) and no poll for ten minutes: only the
    # worker itself can claim the key's next job once a slot is free.
    fake = FakeQueue()
    fake.limits["tenant:1"] = 2
    ids = fake.add(n=6, limit_key="tenant:1")
    ran: list[int] = []
    barrier = threading.Barrier(2, timeout=PATIENCE)  # passes only with both slots in use
    all_ran = threading.Event()

    def call(job: pgqueue.Job) -> None:
        barrier.wait()
        ran.append(job.id)
        if len(ran) == len(ids):
            all_ran.set()

    w = worker(fake, {"k": call}, concurrency=4, poll_interval=600)
    with anyio.fail_after(PATIENCE * 2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.run)
            assert await anyio.to_thread.run_sync(all_ran.wait, PATIENCE)
            w.stop()
    assert sorted(ran) == sorted(fake.succeeded) == ids


async def test_a_quick_jobs_outcome_is_written_while_a_slow_one_of_its_chunk_runs() -> None:
    # One runner, so one chunk: slow, quick, slow, quick. The first slow run
    # shows the kind slow (it takes well over a hop's cost); the second slow
    # handler returns once the quick job before it has its success written,
    # which it only is if that outcome goes out before the slow run begins.
    fake = FakeQueue()
    [teacher] = fake.add("slow")
    [first] = fake.add("quick")
    [slow] = fake.add("slow")
    [last] = fake.add("quick")
    first_written = threading.Event()

    def on_event(event: pgqueue.JobEvent) -> None:
        if event.name == "succeeded" and event.job_id == first:
            first_written.set()

    def run_slow(job: pgqueue.Job) -> None:
        if job.id == teacher:
            time.sleep(10 * WORTH_A_HOP)  # slow: what the test is about, not a wait
        elif not first_written.wait(PATIENCE):
            raise RuntimeError("the quick job's outcome waited for this one")

    w = worker(fake, {"slow": run_slow, "quick": lambda job: None}, concurrency=1,
               on_event=on_event)  # fmt: skip
    with anyio.fail_after(PATIENCE * 2):
        await w.run(until_empty=True)
    assert sorted(fake.succeeded) == [teacher, first, slow, last]


def test_jobs_of_a_kind_known_quick_share_one_hop_however_few_they_are() -> None:
    threads, ledger = plain_threads(jobs=10, concurrency=16)
    # Fewer jobs than runners, of a kind never run: one each, in case they block.
    assert len(threads.take().runs) == 1
    # Known quick (it ran, and not slowly): the rest in one hop.
    threads._ran.add("k")
    assert len(threads.take().runs) == 9
    # Known slow: alone again.
    ledger.claim([context.job for context in contexts(12)][10:])
    threads._slow.add("k")
    assert len(threads.take().runs) == 1
