"""Cancelling running jobs, `job_context()` and return values, on sync, asyncio and trio.

The worker's side of SPEC §5: a cancel reaches the running handler (an
async one through its cancel scope, a plain one through
``job_context().cancel_requested``), by notification or, when that is lost,
by the heartbeat; a cancelled job is gone for good. Handlers and listeners
signal the test through `threading.Event`s (a sync worker runs them in
threads of its own).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.prometheus import PrometheusMetrics

from ..backends import WorkerUnderTest, open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# Generous: a deadline for "it happened at all", never a performance claim.
PATIENCE = 20
KEEP = timedelta(hours=1)


async def wait_for(event: threading.Event) -> None:
    assert await anyio.to_thread.run_sync(event.wait, PATIENCE)


class Events:
    """A worker's listener: every event, and a `threading.Event` per (name, job id) awaited."""

    def __init__(self) -> None:
        self.seen: list[pgqueue.JobEvent] = []
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, int], threading.Event] = {}

    def __call__(self, event: pgqueue.JobEvent) -> None:
        with self._lock:
            self.seen.append(event)
            self._flag(str(event.name), event.job_id).set()

    def _flag(self, name: str, job_id: int) -> threading.Event:
        return self._waiting.setdefault((name, job_id), threading.Event())

    def names(self, job_id: int) -> list[str]:
        with self._lock:
            return [str(e.name) for e in self.seen if e.job_id == job_id]

    def of(self, name: str, job_id: int) -> pgqueue.JobEvent:
        with self._lock:
            [event] = [e for e in self.seen if e.job_id == job_id and str(e.name) == name]
        return event

    async def wait(self, name: str, job_id: int) -> None:
        with self._lock:
            flag = self._flag(name, job_id)
        await wait_for(flag)


async def running(worker: WorkerUnderTest, body: Callable[[], Any]) -> None:
    """Run the worker while ``body`` runs, then stop it."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        try:
            with anyio.fail_after(PATIENCE):
                await body()
        finally:
            worker.stop()


def stop_on_cancel(started: threading.Event, steps: list[int] | None = None) -> Any:
    """A plain handler that works in steps until its cancel, then stops as asked."""

    def handler(job: pgqueue.Job) -> None:
        ctx = pgqueue.job_context()
        assert ctx.job.id == job.id
        started.set()
        step = threading.Event()
        while not ctx.cancel_requested:
            if steps is not None:
                steps.append(job.id)
            step.wait(0.01)  # a step of its work
        ctx.raise_if_cancelled()

    return handler


async def test_job_context_outside_a_handler_raises(backend: str) -> None:
    with pytest.raises(RuntimeError, match="outside a job handler"):
        pgqueue.job_context()


async def test_async_handler_is_cancelled_its_row_is_gone_and_the_worker_goes_on(
    queue: Any, raw: Raw, backend: str
) -> None:
    if backend == "sync":
        pytest.skip("a sync Worker runs plain handlers only")
    events = Events()
    started, ended = threading.Event(), threading.Event()
    never = anyio.Event()
    saw: list[bool] = []

    async def blocked(job: pgqueue.Job) -> None:
        started.set()
        try:
            await never.wait()
        finally:
            saw.append(pgqueue.job_context().cancel_requested)
            ended.set()

    async def body() -> None:
        await wait_for(started)
        cancelled = await queue.cancel(job_id)
        assert (cancelled.deleted, cancelled.requested, cancelled.not_found) == ([], [job_id], [])
        await events.wait("cancelled", job_id)
        after = await queue.enqueue("after")
        await events.wait("succeeded", after)

    job_id = await queue.enqueue("blocked")
    worker = WorkerUnderTest(backend, queue, {"blocked": blocked, "after": lambda job: None},
                             concurrency=1, on_event=events)  # fmt: skip
    await running(worker, body)
    assert ended.is_set() and saw == [True]
    assert raw.count("id = %s", job_id) == 0
    assert events.names(job_id) == ["claimed", "cancelled"]


async def test_plain_handler_polling_cancel_requested_stops_with_raise_if_cancelled(
    queue: Any, raw: Raw, backend: str
) -> None:
    events = Events()
    started = threading.Event()
    steps: list[int] = []
    job_id = await queue.enqueue("poll")

    async def body() -> None:
        await wait_for(started)
        await queue.cancel(job_id)
        await events.wait("cancelled", job_id)

    worker = WorkerUnderTest(backend, queue, {"poll": stop_on_cancel(started, steps)},
                             on_event=events)  # fmt: skip
    await running(worker, body)
    assert steps and raw.count("id = %s", job_id) == 0
    error = events.of("cancelled", job_id).error
    assert error is not None and error.startswith("cancelled: ") and "JobCancelled" in error


async def test_cancelled_job_is_not_retried_and_history_and_result_say_cancelled(
    dsn: str, table: str, raw: Raw, backend: str
) -> None:
    events = Events()
    started = threading.Event()
    runs: list[int] = []

    def handler(job: pgqueue.Job) -> None:
        runs.append(job.attempts)
        ctx = pgqueue.job_context()
        started.set()
        step = threading.Event()
        while not ctx.cancel_requested:
            step.wait(0.01)
        # Not JobCancelled: once its cancel was requested, anything raised
        # ends the job as cancelled, never as a failure to retry.
        raise RuntimeError("stopped half way")

    async with open_queue(backend, dsn, table=table, history=True) as queue:
        await queue.install()
        job_id = await queue.enqueue("flaky", max_attempts=3, result_ttl=KEEP)

        async def body() -> None:
            await wait_for(started)
            await queue.cancel(job_id)
            await events.wait("cancelled", job_id)
            # Anything retried would be claimed before a job enqueued after it.
            after = await queue.enqueue("after")
            await events.wait("succeeded", after)

        handlers = {"flaky": handler, "after": lambda job: None}
        worker = WorkerUnderTest(backend, queue, handlers, on_event=events, concurrency=1)
        await running(worker, body)
        result = await queue.result(job_id)
    assert runs == [1]
    assert raw.count("id = %s", job_id) == 0
    history = raw.rows(f"SELECT outcome FROM {table}_history WHERE id = %s", job_id)
    assert history == [("cancelled",)]
    assert result is not None and result.outcome == "cancelled"
    assert events.names(job_id) == ["claimed", "cancelled"]
    error = events.of("cancelled", job_id).error
    assert error is not None and error.startswith("cancelled: ")
    assert "RuntimeError: stopped half way" in error


async def test_the_cancelled_event_is_counted_by_prometheus(
    queue: Any, table: str, backend: str
) -> None:
    events = Events()
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    started = threading.Event()
    job_id = await queue.enqueue("poll")

    async def body() -> None:
        await wait_for(started)
        await queue.cancel(job_id)
        await events.wait("cancelled", job_id)

    worker = WorkerUnderTest(backend, queue, {"poll": stop_on_cancel(started)},
                             on_event=[events, metrics])  # fmt: skip
    await running(worker, body)
    labels = {"table": table, "queue": "default", "kind": "poll", "event": "cancelled"}
    assert registry.get_sample_value("pgqueue_jobs_total", labels) == 1


async def test_a_cancel_reaches_a_worker_that_cannot_listen_through_its_heartbeat(
    queue: Any, raw: Raw, backend: str
) -> None:
    # Its LISTEN connection is refused over and over: every notification is
    # lost, and the heartbeat (every second meanwhile, not every 75 s) is
    # how the cancel arrives.
    events = Events()
    started = threading.Event()
    job_id = await queue.enqueue("poll")

    async def body() -> None:
        await wait_for(started)
        await queue.cancel(job_id)
        await events.wait("cancelled", job_id)

    worker = WorkerUnderTest(backend, queue, {"poll": stop_on_cancel(started)}, on_event=events,
                             listen_conninfo="host=127.0.0.1 port=1 connect_timeout=2",
                             visibility_timeout=timedelta(minutes=5))  # fmt: skip
    await running(worker, body)
    assert raw.count("id = %s", job_id) == 0


async def test_a_job_cancelled_before_a_runner_begins_it_never_runs(
    queue: Any, raw: Raw, backend: str
) -> None:
    events = Events()
    started, release = threading.Event(), threading.Event()
    ran: list[pgqueue.Job] = []

    def block(job: pgqueue.Job) -> None:
        started.set()
        assert release.wait(PATIENCE)

    # A quick job first: once its handlers have run quicker than a claim, a
    # worker claims beyond one job per runner (`Pace`).
    await queue.enqueue("warm")
    blocker = await queue.enqueue("block")
    victim = await queue.enqueue("victim")

    async def body() -> None:
        await wait_for(started)  # the victim is claimed beside it, behind it
        cancelled = await queue.cancel(victim)
        assert cancelled.requested == [victim]  # claimed: running, for the table
        await events.wait("cancelled", victim)  # while the blocker still runs
        release.set()
        await events.wait("succeeded", blocker)

    handlers = {"warm": lambda job: None, "block": block, "victim": ran.append}
    worker = WorkerUnderTest(backend, queue, handlers, concurrency=1, on_event=events)
    try:
        await running(worker, body)
    finally:
        release.set()
    assert ran == [] and raw.count() == 0


@pytest.fixture
def stranger(server_dsn: str, raw: Raw) -> Iterator[psycopg.Connection[Any]]:
    """A login role with no grant at all: what any login may do to the queue."""
    role = sql.Identifier(f"stranger_{uuid.uuid4().hex[:8]}")
    raw.conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
    try:
        with psycopg.connect(make_conninfo(server_dsn, user=role.as_string()[1:-1]),
                             autocommit=True) as conn:  # fmt: skip
            yield conn
    finally:
        raw.conn.execute(sql.SQL("DROP ROLE {}").format(role))


async def test_notifications_from_a_role_with_no_grant_cancel_and_delete_nothing(
    queue: Any, raw: Raw, backend: str, stranger: psycopg.Connection[Any]
) -> None:
    # SPEC §3: a notification is a hint, never an order. A role that cannot
    # even read the table notifies every channel of the queue, naming the
    # running job; it runs on. A real cancel of another job, notified after
    # them, is handled after them and still reaches its handler.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        stranger.execute(sql.SQL("SELECT 1 FROM {}").format(raw.table))
    events = Events()
    started, victim_started, release = threading.Event(), threading.Event(), threading.Event()
    saw_cancel: list[bool] = []

    def kept(job: pgqueue.Job) -> None:
        started.set()
        assert release.wait(PATIENCE)
        saw_cancel.append(pgqueue.job_context().cancel_requested)

    kept_id = await queue.enqueue("kept")

    async def body() -> None:
        await wait_for(started)
        victim = await queue.enqueue("victim")  # claimed on its own: runs beside it
        await wait_for(victim_started)
        names = queue.core.sql
        forged = [
            (names.control_channel, str(kept_id)),
            (names.control_channel, f"{kept_id},{victim}"),
            (names.control_channel, ",".join(str(i) for i in range(1, 1000))),
            (names.control_channel, "*"),
            (names.control_channel, "all of them"),
            (names.results_channel, str(kept_id)),
            (names.channel, "kept"),
            (names.channel, ""),
        ]
        for channel, payload in forged:
            stranger.execute("SELECT pg_notify(%s, %s)", (channel, payload))
        assert raw.rows("SELECT cancel_requested_at FROM {table} WHERE id = %s", kept_id) == [
            (None,)
        ]
        await queue.cancel(victim)
        await events.wait("cancelled", victim)
        assert events.names(kept_id) == ["claimed"]
        assert raw.rows("SELECT status FROM {table} WHERE id = %s", kept_id) == [("running",)]
        release.set()
        await events.wait("succeeded", kept_id)

    handlers = {"kept": kept, "victim": stop_on_cancel(victim_started)}
    worker = WorkerUnderTest(backend, queue, handlers, on_event=events, concurrency=2)
    try:
        await running(worker, body)
    finally:
        release.set()
    assert saw_cancel == [False]
    assert events.names(kept_id) == ["claimed", "succeeded"]
    assert raw.count() == 0


@pytest.mark.parametrize("style", ["async", "plain"])
async def test_return_values_are_kept_and_one_that_is_not_json_fails_its_job(
    queue: Any, raw: Raw, backend: str, style: str
) -> None:
    if backend == "sync" and style == "async":
        pytest.skip("a sync Worker runs plain handlers only")

    def value(job: pgqueue.Job) -> Any:
        return {"order": job.payload["order"], "total": 12.5} if job.kind == "ok" else {1, 2}

    async def async_value(job: pgqueue.Job) -> Any:
        return value(job)

    handler = async_value if style == "async" else value
    ok = await queue.enqueue("ok", {"order": 7}, result_ttl=KEEP)
    bad = await queue.enqueue("bad", max_attempts=1, result_ttl=KEEP)
    worker = WorkerUnderTest(backend, queue, {"ok": handler, "bad": handler})
    await worker.run(until_empty=True)
    assert await queue.wait(ok, timeout=PATIENCE) == {"order": 7, "total": 12.5}
    result = await queue.result(bad)
    assert result is not None and result.outcome == "dead"
    assert result.error.startswith("ResultNotJSON: the handler of 'bad' returned a value that ")
