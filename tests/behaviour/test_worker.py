"""Workers on sync, asyncio and trio: the cycle, wake-ups, leases, timeouts, shutdown.

Handlers here are plain functions (they run in worker threads on every
backend) and signal the test through `threading.Event`s.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

import pgqueue
from pgqueue import JobStatus

from ..backends import WorkerUnderTest, open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# Generous: a deadline for "it happened at all", never a performance claim.
PATIENCE = 20


async def wait_until(condition: Any, what: str) -> None:
    """Re-check a database condition until it holds."""
    with anyio.fail_after(PATIENCE):
        while not condition():  # noqa: ASYNC110 - the condition lives in the database
            await anyio.sleep(0.05)


async def wait_for(event: threading.Event) -> None:
    assert await anyio.to_thread.run_sync(event.wait, PATIENCE)


async def test_worker_handles_every_job_and_deletes_it(queue: Any, raw: Raw, backend: str) -> None:
    handled: list[int] = []
    ids = await queue.enqueue_many([("add", {"n": i}) for i in range(200)])
    worker = WorkerUnderTest(backend, queue, {"add": lambda job: handled.append(job.id)},
                             concurrency=4, batch_size=25)  # fmt: skip
    await worker.run(until_empty=True)
    assert sorted(handled) == ids
    assert raw.count() == 0


async def test_delayed_job_runs_only_after_its_run_at(queue: Any, backend: str) -> None:
    ran_at: list[datetime] = []
    job_id = await queue.enqueue("later", delay=timedelta(seconds=1))
    due = (await queue.get(job_id)).run_at

    def later(job: pgqueue.Job) -> None:
        ran_at.append(datetime.now(UTC))
        worker.stop()

    worker = WorkerUnderTest(backend, queue, {"later": later}, poll_interval=0.1)
    with anyio.fail_after(PATIENCE):
        await worker.run()
    assert len(ran_at) == 1 and ran_at[0] >= due


async def test_idle_worker_is_woken_by_notify_long_before_its_poll(
    queue: Any, backend: str
) -> None:
    handled = threading.Event()
    worker = WorkerUnderTest(backend, queue, {"ping": lambda job: handled.set()},
                             poll_interval=600)  # fmt: skip
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await queue.enqueue("ping")
        await wait_for(handled)
        worker.stop()


def listener_pids(raw: Raw, queue: Any) -> list[int]:
    listen = queue.core.sql.listen.decode()
    return [r[0] for r in raw.rows("SELECT pid FROM pg_stat_activity WHERE query = %s", listen)]


async def test_job_runs_through_the_poll_while_the_listener_is_down(
    queue: Any, raw: Raw, backend: str
) -> None:
    handled = threading.Event()
    worker = WorkerUnderTest(backend, queue, {"ping": lambda job: handled.set()},
                             poll_interval=0.5)  # fmt: skip
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_until(lambda: listener_pids(raw, queue), "listener up")
        [old] = listener_pids(raw, queue)
        raw.rows("SELECT pg_terminate_backend(%s)", old)
        await queue.enqueue("ping")
        await wait_for(handled)
        # ... and the listener comes back by itself.
        await wait_until(
            lambda: listener_pids(raw, queue) and listener_pids(raw, queue) != [old], "back"
        )
        worker.stop()


async def test_worker_honours_kinds_under_a_flood_of_another_kind(
    queue: Any, raw: Raw, backend: str
) -> None:
    handled: list[str] = []
    await queue.enqueue_many([("flood", i) for i in range(500)])
    await queue.enqueue_many([("mail", i) for i in range(5)])
    worker = WorkerUnderTest(backend, queue, {"mail": lambda job: handled.append(job.kind),
                             "flood": lambda job: handled.append(job.kind)},
                             kinds=["mail"], batch_size=2)  # fmt: skip
    await worker.run(until_empty=True)
    assert handled == ["mail"] * 5
    assert raw.count("kind = 'flood' AND status = 'pending'") == 500


async def test_job_that_outlives_job_timeout_fails_with_a_timeout_error(
    queue: Any, backend: str
) -> None:
    release = threading.Event()
    job_id = await queue.enqueue("slow", max_attempts=1)
    worker = WorkerUnderTest(backend, queue, {"slow": lambda job: release.wait(PATIENCE)},
                             job_timeout=0.3)  # fmt: skip
    try:
        await worker.run(until_empty=True)
    finally:
        release.set()
    job = await queue.get(job_id)
    assert job.status is JobStatus.DEAD
    assert job.last_error.startswith("TimeoutError") and "job_timeout" in job.last_error


async def test_slow_healthy_job_keeps_its_lease_and_runs_once(
    queue: Any, raw: Raw, backend: str, dsn: str, table: str
) -> None:
    runs: Counter[int] = Counter()
    done = threading.Event()

    def slow(job: pgqueue.Job) -> None:
        runs[job.id] += 1
        done.wait(2.5)  # longer than the visibility timeout below

    await queue.enqueue("slow")
    worker = WorkerUnderTest(backend, queue, {"slow": slow},
                             visibility_timeout=timedelta(seconds=1))  # fmt: skip
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(worker.run, until_empty=True))
        # Another worker's reaper, running all the while.
        async with open_queue(backend, dsn, table=table) as other:
            with anyio.move_on_after(2):
                while True:
                    assert await other.reap(timedelta(seconds=1)) == []
                    await anyio.sleep(0.1)
    assert list(runs.values()) == [1]
    assert raw.count() == 0


async def test_handler_exception_is_recorded_retried_and_buried(
    dsn: str, table: str, backend: str
) -> None:
    calls: list[int] = []

    def broken(job: pgqueue.Job) -> None:
        calls.append(job.attempts)
        raise KeyError("no such order")

    backoff = pgqueue.Backoff(base=timedelta(0), jitter=0)
    async with open_queue(backend, dsn, table=table, backoff=backoff) as q:
        await q.install()
        job_id = await q.enqueue("broken", max_attempts=3)
        await WorkerUnderTest(backend, q, {"broken": broken}).run(until_empty=True)
        job = await q.get(job_id)
    assert calls == [1, 2, 3]
    assert job.status is JobStatus.DEAD
    assert job.last_error.startswith("KeyError: 'no such order'")
    assert "in broken" in job.last_error  # the traceback's last frame


async def test_job_without_a_handler_fails_clearly_and_is_buried(
    dsn: str, table: str, backend: str
) -> None:
    backoff = pgqueue.Backoff(base=timedelta(0), jitter=0)
    async with open_queue(backend, dsn, table=table, backoff=backoff) as q:
        await q.install()
        job_id = await q.enqueue("orphan", max_attempts=2)
        await WorkerUnderTest(backend, q, {"known": print}).run(until_empty=True)
        job = await q.get(job_id)
    assert (job.status, job.attempts) == (JobStatus.DEAD, 2)
    assert "no handler for job kind 'orphan'" in job.last_error


async def test_stop_releases_unstarted_jobs_at_once_and_lets_running_ones_finish(
    queue: Any, raw: Raw, backend: str
) -> None:
    started, finish = threading.Event(), threading.Event()
    handled: list[int] = []

    def block(job: pgqueue.Job) -> None:
        started.set()
        finish.wait(PATIENCE)
        handled.append(job.id)

    ids = await queue.enqueue_many([("block", i) for i in range(10)])
    worker = WorkerUnderTest(backend, queue, {"block": block}, concurrency=1, batch_size=10)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_for(started)
        worker.stop()
        # Claimed but never started: back to pending now, their attempt given back.
        await wait_until(lambda: raw.count("status = 'pending' AND attempts = 0") == 9, "released")
        assert raw.count("status = 'running'") == 1
        finish.set()
    assert handled == [ids[0]]
    assert raw.count() == 9


async def test_job_still_running_after_the_grace_period_goes_back_to_pending(
    queue: Any, raw: Raw, backend: str
) -> None:
    started, finish = threading.Event(), threading.Event()

    def stuck(job: pgqueue.Job) -> None:
        started.set()
        finish.wait(PATIENCE)

    job_id = await queue.enqueue("stuck")
    worker = WorkerUnderTest(backend, queue, {"stuck": stuck}, grace_period=0.2)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            await wait_for(started)
            worker.stop()
    finally:
        finish.set()
    job = await queue.get(job_id)
    assert (job.status, job.attempts) == (JobStatus.PENDING, 1)
    assert "interrupted" in job.last_error


async def test_async_handlers_run_on_the_async_worker_and_are_refused_by_the_sync_one(
    queue: Any, backend: str
) -> None:
    handled: list[int] = []

    async def handler(job: pgqueue.Job) -> None:
        await anyio.lowlevel.checkpoint()
        handled.append(job.id)

    job_id = await queue.enqueue("a")
    if backend == "sync":
        with pytest.raises(TypeError, match="async"):
            WorkerUnderTest(backend, queue, {"a": handler})
    else:
        await WorkerUnderTest(backend, queue, {"a": handler}).run(until_empty=True)
        assert handled == [job_id]


async def test_worker_survives_its_connections_being_killed_and_loses_nothing(
    queue: Any, raw: Raw, backend: str
) -> None:
    handled: Counter[int] = Counter()
    lock = threading.Lock()
    killed = threading.Event()
    ids = await queue.enqueue_many([("work", i) for i in range(300)])
    me = raw.one("SELECT pg_backend_pid()")

    def work(job: pgqueue.Job) -> None:
        with lock:
            handled[job.id] += 1
            first_kill = len(handled) == 100 and not killed.is_set()
            if first_kill:
                killed.set()
        if first_kill:
            # Every other session of this database: the pool's and the listener's.
            raw.rows(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> %s "
                "AND backend_type = 'client backend'",
                me,
            )

    # A short lease, so that a claim lost with its connection comes back.
    worker = WorkerUnderTest(backend, queue, {"work": work}, poll_interval=0.2,
                             visibility_timeout=timedelta(seconds=2))  # fmt: skip
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_until(lambda: raw.count() == 0, "drained")
        worker.stop()
    assert killed.is_set()
    assert set(handled) == set(ids)  # at least once each; none lost


async def test_orphaned_jobs_run_alone_so_a_poison_job_takes_no_other_job_down(
    queue: Any, raw: Raw, backend: str
) -> None:
    # A worker that vanished holding a batch: the reaper returns it, each job
    # with an attempt used and the reaper's note as its last error.
    orphans = await queue.enqueue_many([("check", i) for i in range(5)])
    await queue.claim(5, worker="vanished")
    raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour'")
    assert sorted(await queue.reap(timedelta(minutes=5))) == orphans
    assert [(await queue.get(i)).orphaned for i in orphans] == [True] * 5
    fresh = await queue.enqueue_many([("check", i) for i in range(5, 25)])

    # What else this worker held while each job ran, read from the table.
    held_beside: dict[int, int] = {}

    def check(job: pgqueue.Job) -> None:
        held_beside[job.id] = raw.count("status = 'running' AND id <> %s", job.id)

    lock = threading.Lock()  # the raw connection is shared by the worker's threads

    def check_locked(job: pgqueue.Job) -> None:
        with lock:
            check(job)

    worker = WorkerUnderTest(backend, queue, {"check": check_locked}, concurrency=4, batch_size=10)
    await worker.run(until_empty=True)

    assert sorted(held_beside) == sorted(orphans + fresh)
    assert {i: held_beside[i] for i in orphans} == dict.fromkeys(orphans, 0)
    assert raw.count() == 0


async def test_a_busy_worker_holds_an_orphan_and_runs_it_alone_once_its_jobs_are_done(
    queue: Any, raw: Raw, backend: str
) -> None:
    long_started, release_long = threading.Event(), threading.Event()
    lock = threading.Lock()  # the raw connection is shared by the worker's threads
    held_beside: dict[int, int] = {}

    def long(job: pgqueue.Job) -> None:
        long_started.set()
        assert release_long.wait(PATIENCE)

    def check(job: pgqueue.Job) -> None:
        with lock:
            held_beside[job.id] = raw.count("status = 'running' AND id <> %s", job.id)

    await queue.enqueue("long")
    worker = WorkerUnderTest(
        backend, queue, {"long": long, "check": check},
        concurrency=2, visibility_timeout=timedelta(seconds=2), poll_interval=0.2,
    )  # fmt: skip
    name = worker.worker.name
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_for(long_started)
        # An orphan appears while the worker is busy, with other work beside it.
        with lock:
            [(orphan,)] = raw.rows(
                "INSERT INTO {table} (kind, payload, attempts, last_error)"
                " VALUES ('check', 'null', 1, 'lease expired: test') RETURNING id"
            )
        others = await queue.enqueue_many([("check", i) for i in range(10)])

        def orphan_held() -> bool:
            with lock:
                return bool(
                    raw.count("id = %s AND status = 'running' AND locked_by = %s", orphan, name)
                )

        # It does not wait for the worker to be idle: the long job is still running.
        await wait_until(orphan_held, "the busy worker to claim the orphan")
        assert orphan not in held_beside
        release_long.set()
        await wait_until(lambda: len(held_beside) == 11, "every check job")
        worker.stop()
    assert held_beside[orphan] == 0  # alone
    assert sorted(held_beside) == sorted([orphan, *others])
    assert raw.count() == 0


async def test_a_failed_job_is_no_longer_orphaned(queue: Any, raw: Raw) -> None:
    job_id = await queue.enqueue("a", max_attempts=5)
    await queue.claim(1, worker="vanished")
    raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour'")
    await queue.reap(timedelta(minutes=5))
    [job] = await queue.claim(1)
    assert job.orphaned
    assert await queue.fail(job, "boom", retry_in=timedelta(0)) is JobStatus.PENDING
    assert not (await queue.get(job_id)).orphaned


async def test_a_buried_orphan_retried_by_an_operator_still_runs_alone(
    queue: Any, raw: Raw
) -> None:
    job_id = await queue.enqueue("a", max_attempts=1)
    await queue.claim(1, worker="vanished")
    raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour'")
    await queue.reap(timedelta(minutes=5))  # its only attempt: buried
    assert (await queue.get(job_id)).status is JobStatus.DEAD
    assert await queue.retry(job_id) == 1
    assert (await queue.get(job_id)).orphaned
    assert [j.id for j in await queue._claim_orphan(worker="w")] == [job_id]
