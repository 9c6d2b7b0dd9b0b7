"""The worker's side of cancellation, `job_context()` and results, against `FakeQueue`.

The fake never notifies: every cancel here reaches the worker through its
heartbeat, and every `UNHEARD_BEAT` seconds from a look while nobody listens
(shortened here). The behaviour suite (tests/behaviour/test_cancel_worker.py)
runs the same on a real server, notifications included.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anyio
import anyio.to_thread
import pytest

import pgqueue
from pgqueue import JobEvent, JobStatus
from pgqueue.aio.worker import lease as lease_module
from pgqueue.aio.worker.calls import Calls
from pgqueue.aio.worker.flags import Wakeup
from pgqueue.aio.worker.lease import LeaseKeeper, beat_interval
from pgqueue.aio.worker.notifier import Notifier, cancelled_ids
from pgqueue.core import context as context_module
from pgqueue.core.ledger import Ledger
from pgqueue.core.worker import Outcome, WorkerSettings

from .fake import FakeQueue

pytestmark = pytest.mark.anyio

PATIENCE = 5  # a deadline for "it happened at all", never a performance claim
KEEP = timedelta(hours=1)
UNHEARD_BEAT = lease_module.UNHEARD_BEAT  # as shipped


@pytest.fixture(autouse=True)
def quick_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Heartbeats every 20 ms while nobody listens (the fake never does)."""
    monkeypatch.setattr(lease_module, "UNHEARD_BEAT", 0.02)


class Events:
    """A worker's listener: every event, and an `anyio.Event` per (name, job id) awaited."""

    def __init__(self) -> None:
        self.seen: list[JobEvent] = []
        self._waiting: dict[tuple[str, int], anyio.Event] = {}

    def __call__(self, event: JobEvent) -> None:
        self.seen.append(event)
        waiting = self._waiting.get((str(event.name), event.job_id))
        if waiting is not None:
            waiting.set()

    def names(self, job_id: int) -> list[str]:
        return [str(e.name) for e in self.seen if e.job_id == job_id]

    def of(self, name: str, job_id: int) -> JobEvent:
        [event] = [e for e in self.seen if e.job_id == job_id and str(e.name) == name]
        return event

    async def wait(self, name: str, job_id: int) -> None:
        if name in self.names(job_id):
            return
        event = self._waiting.setdefault((name, job_id), anyio.Event())
        await event.wait()


def worker(fake: FakeQueue, handlers: dict[str, Any], events: Events, **options: Any) -> Any:
    options.setdefault("handle_signals", False)
    options.setdefault("poll_interval", 0.05)
    return pgqueue.AsyncWorker(fake, handlers, on_event=events, **options)  # type: ignore[arg-type]


async def running(w: Any, body: Callable[[], Any]) -> None:
    """Run the worker while ``body`` runs, then stop it."""
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.run)
            await body()
            w.stop()


async def in_thread(event: threading.Event) -> None:
    assert await anyio.to_thread.run_sync(event.wait, PATIENCE)


# -- job_context ------------------------------------------------------------------


def test_job_context_outside_a_handler_says_so() -> None:
    with pytest.raises(RuntimeError, match=r"outside a job handler"):
        pgqueue.job_context()


def test_job_context_doctests() -> None:
    import doctest

    assert doctest.testmod(context_module, raise_on_error=True).attempted > 0


async def test_job_context_reaches_async_and_plain_handlers_and_every_job_has_its_own() -> None:
    fake = FakeQueue()
    ids = fake.add("async", 3) + fake.add("plain", 3)
    seen: dict[int, tuple[int, str | None, bool]] = {}

    async def in_loop(job: pgqueue.Job) -> None:
        ctx = pgqueue.job_context()
        seen[job.id] = (ctx.job.id, ctx.worker, ctx.cancel_requested)

    def in_thread(job: pgqueue.Job) -> None:
        ctx = pgqueue.job_context()
        seen[job.id] = (ctx.job.id, ctx.worker, ctx.cancel_requested)

    w = worker(fake, {"async": in_loop, "plain": in_thread}, Events(), name="w1")
    await w.run(until_empty=True)
    assert seen == {i: (i, "w1", False) for i in ids}
    with pytest.raises(RuntimeError):  # and nothing of it is left behind
        pgqueue.job_context()


# -- cancel -----------------------------------------------------------------------


async def test_cancel_of_a_running_async_handler_cancels_it_and_the_runner_goes_on() -> None:
    fake = FakeQueue()
    [victim] = fake.add("victim")
    events = Events()
    started = anyio.Event()
    saw: list[bool] = []

    async def victim_handler(job: pgqueue.Job) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            saw.append(pgqueue.job_context().cancel_requested)

    async def body() -> None:
        await started.wait()
        fake.cancel(victim)
        await events.wait("cancelled", victim)
        # The same (only) runner runs the next job in a new lane.
        [after] = fake.add("after")
        await events.wait("succeeded", after)

    w = worker(fake, {"victim": victim_handler, "after": lambda job: None}, events,
               concurrency=1)  # fmt: skip
    await running(w, body)
    assert saw == [True]
    assert victim in fake.cancelled and victim not in fake.jobs
    assert events.names(victim) == ["claimed", "cancelled"]
    error = events.of("cancelled", victim).error
    assert error is not None and error.startswith("cancelled: ")


async def test_an_async_handler_that_swallows_its_cancel_and_returns_succeeded() -> None:
    fake = FakeQueue()
    [job_id] = fake.add("stubborn")
    events = Events()
    started = anyio.Event()

    async def stubborn(job: pgqueue.Job) -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            return "done anyway"  # swallowed: what is under test
        return "unreachable"

    async def body() -> None:
        await started.wait()
        fake.cancel(job_id)
        await events.wait("succeeded", job_id)
        [after] = fake.add("after")
        await events.wait("succeeded", after)

    w = worker(fake, {"stubborn": stubborn, "after": lambda job: None}, events, concurrency=1)
    await running(w, body)
    assert job_id in fake.succeeded


async def test_a_plain_handler_sees_cancel_requested_and_stops_with_raise_if_cancelled() -> None:
    fake = FakeQueue()
    [job_id] = fake.add("poll")
    events = Events()
    started = threading.Event()
    steps: list[int] = []

    def poll(job: pgqueue.Job) -> None:
        ctx = pgqueue.job_context()
        started.set()
        step = threading.Event()
        while not ctx.cancel_requested:
            steps.append(1)
            step.wait(0.005)  # a step of the handler's work
        ctx.raise_if_cancelled()

    async def body() -> None:
        await in_thread(started)
        fake.cancel(job_id)
        await events.wait("cancelled", job_id)

    await running(worker(fake, {"poll": poll}, events), body)
    assert job_id in fake.cancelled and steps
    error = events.of("cancelled", job_id).error
    assert error is not None and error.startswith("cancelled: ") and "JobCancelled" in error


async def test_a_plain_handler_that_returns_after_its_cancel_succeeded() -> None:
    fake = FakeQueue()
    [job_id] = fake.add("finish", result_ttl=KEEP)
    events = Events()
    started = threading.Event()

    def handler(job: pgqueue.Job) -> int:
        ctx = pgqueue.job_context()
        started.set()
        step = threading.Event()
        while not ctx.cancel_requested:
            step.wait(0.005)
        return 7  # finished its step after all: a success

    async def body() -> None:
        await in_thread(started)
        fake.cancel(job_id)
        await events.wait("succeeded", job_id)

    await running(worker(fake, {"finish": handler}, events), body)
    assert fake.succeeded == [job_id] and fake.results == {job_id: "7"}


async def test_a_claimed_job_cancelled_before_it_starts_never_starts() -> None:
    fake = FakeQueue()
    # A quick job first: once its handlers have run quicker than a claim, a
    # worker claims beyond one job per runner (`Pace`).
    fake.add("warm")
    [blocker] = fake.add("block")
    [victim] = fake.add("victim")
    events = Events()
    started, release = anyio.Event(), anyio.Event()
    ran: list[int] = []

    async def block(job: pgqueue.Job) -> None:
        started.set()
        await release.wait()

    async def victim_handler(job: pgqueue.Job) -> None:
        ran.append(job.id)

    async def body() -> None:
        await started.wait()  # the victim is claimed beside it, waiting for the one runner
        fake.cancel(victim)
        await events.wait("cancelled", victim)
        release.set()
        await events.wait("succeeded", blocker)

    async def warm(job: pgqueue.Job) -> None:
        pass

    w = worker(fake, {"warm": warm, "block": block, "victim": victim_handler}, events,
               concurrency=1)  # fmt: skip
    await running(w, body)
    assert ran == [] and victim in fake.cancelled
    assert events.names(victim) == ["claimed", "cancelled"]
    error = events.of("cancelled", victim).error
    assert error is not None and "before it started" in error


async def test_a_plain_job_waiting_in_a_thread_chunk_is_withdrawn_at_once() -> None:
    fake = FakeQueue()
    fake.add("warm")  # quick: the worker then claims both jobs below at once (`Pace`)
    [blocker] = fake.add("block")
    [victim] = fake.add("victim")
    events = Events()
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def block(job: pgqueue.Job) -> None:
        started.set()
        assert release.wait(PATIENCE)

    async def body() -> None:
        await in_thread(started)  # both in one chunk: the victim waits behind it
        fake.cancel(victim)
        await events.wait("cancelled", victim)  # while the blocker still runs
        release.set()
        await events.wait("succeeded", blocker)

    handlers = {"warm": lambda job: None, "block": block, "victim": lambda job: ran.append(job.id)}
    w = worker(fake, handlers, events, concurrency=1)
    await run_and_release(w, body, release)
    assert ran == [] and victim in fake.cancelled


async def run_and_release(w: Any, body: Callable[[], Any], release: threading.Event) -> None:
    """`running`, and the blocked thread let go whatever happens (else the test hangs)."""
    try:
        await running(w, body)
    finally:
        release.set()


async def test_a_held_orphan_cancelled_never_runs_and_the_worker_goes_on() -> None:
    fake = FakeQueue()
    [blocker] = fake.add("block")
    [orphan] = fake.add("orphan", orphaned=True)
    events = Events()
    started, release = anyio.Event(), anyio.Event()
    ran: list[int] = []

    async def block(job: pgqueue.Job) -> None:
        started.set()
        await release.wait()

    async def body() -> None:
        await started.wait()
        while fake.status(orphan) is not JobStatus.RUNNING:  # noqa: ASYNC110 - the fake's state
            await anyio.sleep(0.01)
        # Claimed, and held until the blocker is done.
        fake.cancel(orphan)
        await events.wait("cancelled", orphan)
        release.set()
        await events.wait("succeeded", blocker)
        [after] = fake.add("after")
        await events.wait("succeeded", after)

    handlers = {"block": block, "orphan": lambda job: ran.append(job.id),
                "after": lambda job: None}  # fmt: skip
    await running(worker(fake, handlers, events), body)
    assert ran == [] and orphan in fake.cancelled


async def test_cancels_of_jobs_not_held_or_asked_twice_change_nothing() -> None:
    fake = FakeQueue()
    [job_id] = fake.add("victim")
    events = Events()
    started = anyio.Event()
    cancels: list[int] = []

    async def victim(job: pgqueue.Job) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancels.append(job.id)

    async def body() -> None:
        await started.wait()
        runners = w._crew.runners
        runners.cancel([999, 1000])  # not this worker's
        fake.cancel(job_id)
        runners.cancel([job_id, job_id])  # and the heartbeat asks again
        await events.wait("cancelled", job_id)
        runners.cancel([job_id])  # its outcome is decided already

    w = worker(fake, {"victim": victim}, events)
    await running(w, body)
    assert cancels == [job_id]
    assert events.names(job_id) == ["claimed", "cancelled"]


async def test_cancelled_jobs_are_logged_once_written(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgqueue.worker")
    fake = FakeQueue()
    [job_id] = fake.add("victim")
    events = Events()
    started = anyio.Event()

    async def victim(job: pgqueue.Job) -> None:
        started.set()
        await anyio.sleep_forever()

    async def body() -> None:
        await started.wait()
        fake.cancel(job_id)
        await events.wait("cancelled", job_id)

    await running(worker(fake, {"victim": victim}, events, name="w1"), body)
    assert f"recorded 1 cancelled jobs (deleted, never retried): {job_id} (victim)" in caplog.text


async def test_a_job_interrupted_at_shutdown_is_interrupted_not_cancelled() -> None:
    fake = FakeQueue()
    [job_id] = fake.add("slow")
    events = Events()
    started = anyio.Event()

    async def slow(job: pgqueue.Job) -> None:
        started.set()
        await anyio.sleep_forever()

    async def body() -> None:
        await started.wait()

    await running(worker(fake, {"slow": slow}, events, grace_period=0.01), body)
    assert events.names(job_id) == ["claimed", "interrupted"]
    assert fake.status(job_id) is JobStatus.PENDING


# -- the heartbeat's pace ------------------------------------------------------------


def test_the_keeper_beats_every_second_while_nobody_listens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lease_module, "UNHEARD_BEAT", UNHEARD_BEAT)  # not `quick_beats`'
    settings = WorkerSettings(visibility_timeout=timedelta(minutes=5))
    assert beat_interval(settings, listening=True) == 75.0
    assert beat_interval(settings, listening=False) == 1.0
    short = WorkerSettings(visibility_timeout=timedelta(seconds=2))
    assert beat_interval(short, listening=False) == 0.5  # never slower than the lease needs


async def test_the_keeper_looks_at_once_when_listening_starts_or_stops() -> None:
    fake = FakeQueue()
    settings = WorkerSettings(name="w1", visibility_timeout=timedelta(hours=1))
    fake.add()
    [job] = fake._claim("w1", 1, None, None, orphans=False)
    ledger: Ledger[Outcome] = Ledger()
    ledger.claim([job])
    notifier = Notifier("w1", fake, Wakeup(), anyio.Event())
    notifier.listening = True  # a beat every 15 minutes
    asked: list[list[int]] = []
    keeper = LeaseKeeper(settings, fake, Calls("w1", fake.table), ledger,
                         lambda ids: asked.append(list(ids)), notifier)  # fmt: skip
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(keeper.run)
            fake.cancel(job.id)
            look = fake.started("cancel_requests")
            notifier._heard(False)  # the connection is lost: look now, then every second
            await look.wait()
            # And again a second later, well before the next beat in 15 minutes.
            await fake.started("cancel_requests").wait()
            notifier._heard(True)
            await fake.started("cancel_requests").wait()  # listening again: a look at once
            tg.cancel_scope.cancel()
    assert asked and all(ids == [job.id] for ids in asked)
    assert "heartbeat" not in fake.calls


async def test_a_control_notification_is_a_hint_the_table_confirms() -> None:
    # Anyone may notify: a notification naming a job held here makes the
    # keeper look (a read), and only what the table says is cancelled.
    fake = FakeQueue()
    settings = WorkerSettings(name="w1", visibility_timeout=timedelta(hours=1))
    fake.add(), fake.add()
    requested, forged = fake._claim("w1", 2, None, None, orphans=False)
    ledger: Ledger[Outcome] = Ledger()
    ledger.claim([requested, forged])
    notifier = Notifier("w1", fake, Wakeup(), anyio.Event(), holds=ledger.holds)
    notifier.listening = True
    asked: list[list[int]] = []
    keeper = LeaseKeeper(settings, fake, Calls("w1", fake.table), ledger,
                         lambda ids: asked.append(list(ids)), notifier)  # fmt: skip
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(keeper.run)
            notifier._hint([10_000, 10_001])  # no job held here: nothing to look at
            assert not notifier.look_now._set
            look = fake.started("cancel_requests")
            notifier._hint([forged.id])  # held here, but no request in the table
            await look.wait()
            fake.cancel(requested.id)
            look = fake.started("cancel_requests")
            notifier._hint(None)  # "*": look at every job held here
            await look.wait()
            tg.cancel_scope.cancel()
    assert asked == [[requested.id]]


def test_control_notifications_name_job_ids_or_ask_for_a_look() -> None:
    assert cancelled_ids("3,14,15") == [3, 14, 15]
    assert cancelled_ids("*") is None
    with pytest.raises(ValueError):
        cancelled_ids("three")


# -- results ------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["async", "plain"])
async def test_a_return_value_is_written_with_its_success_only_if_the_job_keeps_it(
    style: str,
) -> None:
    fake = FakeQueue()
    kept = fake.add("r", 2, result_ttl=KEEP)
    [dropped] = fake.add("r")

    def value(job: pgqueue.Job) -> Any:
        return {"id": job.id, "ok": True}

    async def async_value(job: pgqueue.Job) -> Any:
        return value(job)

    handler = async_value if style == "async" else value
    await worker(fake, {"r": handler}, Events()).run(until_empty=True)
    assert sorted(fake.succeeded) == sorted([*kept, dropped])
    assert fake.results == {i: f'{{"id":{i},"ok":true}}' for i in kept}


@pytest.mark.parametrize("style", ["async", "plain"])
async def test_a_return_value_that_is_not_json_fails_the_job_with_a_clear_error(
    style: str,
) -> None:
    fake = FakeQueue()
    [bad] = fake.add("r", result_ttl=KEEP)
    [nan] = fake.add("nan", result_ttl=KEEP)
    [fine] = fake.add("r")  # keeps nothing: its return value is never looked at
    events = Events()

    def value(job: pgqueue.Job) -> Any:
        return float("nan") if job.kind == "nan" else {1, 2}

    async def async_value(job: pgqueue.Job) -> Any:
        return value(job)

    handler = async_value if style == "async" else value
    await worker(fake, {"r": handler, "nan": handler}, events).run(until_empty=True)
    assert fake.succeeded == [fine] and fake.results == {}
    for job_id in (bad, nan):
        job = fake.jobs[job_id]
        assert job.status is JobStatus.PENDING and job.last_error is not None
        assert job.last_error.startswith("ResultNotJSON: the handler of ")
        assert "cannot be kept as JSON (result_ttl)" in job.last_error
        assert events.names(job_id) == ["claimed", "failed"]
