"""The worker's components against `FakeQueue`: start-up, lost leases and shutdown
in every phase, with no database (the behaviour suites run the real thing)."""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import pgqueue
from pgqueue import JobStatus
from pgqueue.aio.worker import crew as crew_module
from pgqueue.aio.worker.calls import Calls
from pgqueue.aio.worker.completer import Completer
from pgqueue.aio.worker.flags import Broadcast, call_soon
from pgqueue.aio.worker.lease import LeaseKeeper
from pgqueue.aio.worker.reporter import Reporter
from pgqueue.core.ledger import Ledger, Phase
from pgqueue.core.worker import Outcome, WorkerSettings

from .fake import FakeQueue

pytestmark = pytest.mark.anyio

PATIENCE = 5  # a deadline for "it happened at all", never a performance claim


def worker(fake: FakeQueue, handlers: dict[str, Any], **options: Any) -> pgqueue.AsyncWorker:
    options.setdefault("handle_signals", False)
    options.setdefault("poll_interval", 0.05)
    return pgqueue.AsyncWorker(fake, handlers, **options)  # type: ignore[arg-type]


async def test_worker_with_listen_refused_claims_by_polling_and_stops_when_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeQueue()
    ids = fake.add(n=5)
    done = anyio.Event()
    handled: list[int] = []

    async def handle(job: pgqueue.Job) -> None:
        handled.append(job.id)
        if len(handled) == len(ids):
            done.set()

    w = worker(fake, {"k": handle})
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.run)
            await done.wait()
            w.stop()
    assert sorted(fake.succeeded) == ids
    assert fake.calls["listen"] >= 1
    assert "listener lost (too many connections for role); polling meanwhile" in caplog.text


async def test_a_second_run_idles_instead_of_spinning() -> None:
    fake = FakeQueue()
    fake.add(n=3)
    w = worker(fake, {"k": lambda job: None}, poll_interval=0.1)
    await w.run(until_empty=True)
    assert len(fake.succeeded) == 3
    claims_before = fake.calls["turn"]
    async with anyio.create_task_group() as tg:
        tg.start_soon(w.run)
        await anyio.sleep(0.5)  # the window in which claims are counted
        w.stop()
    # One claim per poll (about 5 in the window) and a few at start-up; a
    # spinning worker makes thousands.
    assert fake.calls["turn"] - claims_before <= 15


async def test_stop_before_run_stops_that_run_at_once() -> None:
    fake = FakeQueue()
    fake.add(n=2)
    w = worker(fake, {"k": lambda job: None})
    w.stop()
    with anyio.fail_after(PATIENCE):
        await w.run()
    assert fake.calls["turn"] == 0
    assert all(fake.status(i) is JobStatus.PENDING for i in (1, 2))


async def test_stop_with_a_claim_in_flight_releases_what_it_claimed() -> None:
    fake = FakeQueue()
    ids = fake.add(n=4)
    gate = fake.hold("turn")
    entered = fake.started("turn")
    w = worker(fake, {"k": lambda job: None})
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.run)
            await entered.wait()
            w.stop()
            gate.set()  # the claim commits after the stop: its jobs go back
    for i in ids:
        job = fake.jobs[i]
        assert (job.status, job.attempts) == (JobStatus.PENDING, 0)  # attempt given back
    assert not fake.succeeded


async def test_stop_gives_up_a_claim_that_does_not_return_whatever_the_grace_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A server that refuses or does not answer: the claim never returns. The
    # grace period is the handlers' (none runs); the claim gets CLAIM_CUT.
    monkeypatch.setattr(crew_module, "CLAIM_CUT", 0.2)
    fake = FakeQueue()
    fake.add(n=2)
    gate = fake.hold("turn")
    entered = fake.started("turn")
    w = worker(fake, {"k": lambda job: None}, grace_period=PATIENCE * 10)
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.run)
            await entered.wait()
            w.stop()
    assert not gate.is_set()  # returned while the claim still waited


async def test_a_second_stop_cuts_the_last_outcomes_short(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The database went away while a job ran: its outcome cannot be written.
    # After an abort (a second signal) the flush gets ABORT_FLUSH, not the
    # FLUSH_DEADLINE a graceful stop allows.
    monkeypatch.setattr(crew_module, "FLUSH_DEADLINE", PATIENCE * 10)
    monkeypatch.setattr(crew_module, "ABORT_FLUSH", 0.2)
    fake = FakeQueue()
    [job_id] = fake.add()
    ran = anyio.Event()

    async def handle(job: pgqueue.Job) -> None:
        fake.down = True
        ran.set()

    w = worker(fake, {"k": handle})
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.run)
            await ran.wait()
            w.stop()
            assert w._crew is not None
            w._crew.abort()  # as a second SIGINT does, before the flush begins
    assert fake.status(job_id) is JobStatus.RUNNING  # it comes back through its lease
    assert re.search(rf"gave up writing 1 outcomes after 0\.[2-9]s; those jobs come back when "
                     rf"their lease expires: {job_id} \(k\)", caplog.text)  # fmt: skip


async def test_stop_lets_running_jobs_finish_within_the_grace_period_then_interrupts() -> None:
    fake = FakeQueue()
    quick, slow = fake.add("quick")[0], fake.add("slow")[0]
    both_started = anyio.Event()
    started: list[int] = []
    finish_quick = anyio.Event()

    async def handle(job: pgqueue.Job) -> None:
        started.append(job.id)
        if len(started) == 2:
            both_started.set()
        if job.kind == "quick":
            await finish_quick.wait()
        else:
            await anyio.sleep_forever()

    w = worker(fake, {"quick": handle, "slow": handle}, grace_period=0.3)
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.run)
            await both_started.wait()
            w.stop()
            finish_quick.set()
    assert fake.succeeded == [quick]
    job = fake.jobs[slow]
    assert (job.status, job.attempts) == (JobStatus.PENDING, 1)  # interrupted: attempt counted
    assert job.last_error is not None and job.last_error.startswith("interrupted")


async def test_stop_with_the_database_gone_returns_after_a_bounded_flush(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(crew_module, "FLUSH_DEADLINE", 0.5)
    fake = FakeQueue()
    [job_id] = fake.add()
    ran = anyio.Event()

    async def handle(job: pgqueue.Job) -> None:
        fake.down = True  # the outcome cannot be written any more
        ran.set()

    w = worker(fake, {"k": handle})
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.run)
            await ran.wait()
            w.stop()
    # Not written: the job comes back through its lease, as after a crash.
    assert fake.status(job_id) is JobStatus.RUNNING
    assert re.search(rf"gave up writing 1 outcomes after 0\.[5-9]s; those jobs come back when "
                     rf"their lease expires: {job_id} \(k\)", caplog.text)  # fmt: skip


async def test_claim_errors_are_retried_with_backoff(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeQueue()
    ids = fake.add(n=10)
    fake.failing["turn"] = 2
    w = worker(fake, {"k": lambda job: None}, batch_size=3)
    with anyio.fail_after(PATIENCE):
        await w.run(until_empty=True)
    assert sorted(fake.succeeded) == ids
    assert caplog.text.count("claim failed") == 2


async def test_lost_lease_means_not_started_and_outcome_not_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    fake = FakeQueue()
    settings = WorkerSettings(name="w1")
    fake.add(n=2)
    first, second = fake._claim("w1", 2, None, None, orphans=False)
    ledger: Ledger[Outcome] = Ledger()
    ledger.claim([first, second])
    ledger.start(first.id)
    # Another worker's reaper took both back meanwhile.
    del fake.jobs[first.id], fake.jobs[second.id]
    calls = Calls("w1", fake.table)
    keeper = LeaseKeeper(settings, fake, calls, ledger)
    await keeper.beat()
    assert ledger.phase(first.id) is Phase.LOST  # still running here
    assert ledger.phase(second.id) is None  # never to be started
    assert ledger.next_unstarted() is None
    completer = Completer(fake, calls, ledger, Reporter("w1", fake.table, []), Broadcast(),
                          worker="w1")  # fmt: skip
    completer.succeeded(first)
    await completer.write()
    assert fake.calls["settle"] == 0 and not ledger.busy()
    assert "lost the lease of 2 jobs" in caplog.text
    assert f"job {first.id} (k) finished after its lease was lost" in caplog.text


async def test_an_orphan_runs_alone_and_the_next_one_follows_at_once() -> None:
    fake = FakeQueue()
    orphans = fake.add("orphan", 3, orphaned=True)
    others = fake.add("other", 20)
    running: set[int] = set()
    beside_an_orphan: list[set[int]] = []

    async def handle(job: pgqueue.Job) -> None:
        running.add(job.id)
        if job.kind == "orphan":
            beside_an_orphan.append(set(running) - {job.id})
        await anyio.lowlevel.checkpoint()
        running.discard(job.id)

    w = worker(fake, {"orphan": handle, "other": handle}, batch_size=5)
    with anyio.fail_after(PATIENCE):
        await w.run(until_empty=True)
    assert sorted(fake.succeeded) == sorted(orphans + others)
    assert beside_an_orphan == [set(), set(), set()]
    # The three one after another, one look that finds none, and the last
    # look before the drain ends.
    assert fake.calls["claim_orphan"] == 5


async def test_job_events_are_the_same_as_on_a_real_server() -> None:
    fake = FakeQueue()
    ok, bad = fake.add("ok")[0], fake.add("bad")[0]
    events: list[tuple[str, int]] = []

    def boom(job: pgqueue.Job) -> None:
        raise ValueError("no")

    w = worker(fake, {"ok": lambda job: None, "bad": boom},
               on_event=lambda e: events.append((str(e.name), e.job_id)))  # fmt: skip
    await w.run(until_empty=True)
    assert sorted(events) == sorted(
        [("claimed", ok), ("claimed", bad), ("succeeded", ok), ("failed", bad)]
    )
    assert fake.jobs[bad].last_error.startswith("ValueError: no")  # type: ignore[union-attr]
    assert timedelta(0) < WorkerSettings().visibility_timeout


async def test_claims_cancelled_by_the_server_ask_for_fewer_jobs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeQueue()
    ids = fake.add(n=50)
    fake.claim_limit = 10
    w = worker(fake, {"k": lambda job: None}, batch_size=64)
    with anyio.fail_after(PATIENCE):
        await w.run(until_empty=True)
    assert sorted(fake.succeeded) == ids
    # 64 -> 32 -> 16 -> 8: a cancelled claim halves the next ones (two in
    # flight may both be cancelled), then claims of 8 go through.
    assert caplog.text.count("jobs was cancelled by the server") >= 3
    assert "claiming at most 8 jobs at a time" in caplog.text
    assert "claiming at most 4 jobs" not in caplog.text


async def test_a_job_claimed_again_while_still_running_here_is_given_back_not_a_crash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeQueue()
    [job_id] = fake.add()
    started, finish = anyio.Event(), anyio.Event()
    runs: list[int] = []

    async def handle(job: pgqueue.Job) -> None:
        runs.append(job.attempts)
        if len(runs) == 1:
            started.set()
            await finish.wait()

    w = worker(fake, {"k": handle})
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.run)
            await started.wait()
            # Its lease expired meanwhile (a blocked loop) and a reaper put it
            # back: this worker's next claim takes it again.
            job = fake.jobs[job_id]
            fake.jobs[job_id] = job.__class__(
                job.id, job.kind, job.payload, job.attempts, job.max_attempts,
                JobStatus.PENDING, job.run_at, None, None, None, job.created_at,
            )  # fmt: skip
            given_back = fake.started("settle")  # the release of the second claim
            await given_back.wait()
            finish.set()
            with anyio.fail_after(PATIENCE):
                while fake.status(job_id) is not None:  # noqa: ASYNC110 - the fake's state
                    await anyio.sleep(0.01)
            w.stop()
    assert "claimed again 1 jobs it was still running" in caplog.text
    # The second claim was given back with its attempt; the run after it is
    # the job's second attempt (the first, whose lease expired, counts).
    assert runs == [1, 2]
    assert fake.succeeded == [job_id]


@pytest.mark.parametrize(
    ("option", "value", "error", "message"),
    [
        ("concurrency", 0, ValueError, "concurrency must be at least 1, got 0"),
        ("concurrency", "4", TypeError, "concurrency must be an int, not str"),
        ("batch_size", -1, ValueError, "batch_size must be at least 1, got -1"),
        ("poll_interval", 0, ValueError, "poll_interval must be positive"),
        ("grace_period", "30", TypeError, "grace_period must be seconds or a timedelta"),
    ],
)
def test_bad_worker_settings_are_named_in_the_error(
    option: str, value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        worker(FakeQueue(), {"k": lambda job: None}, **{option: value})


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_thread_hands_over_to_an_event_loop_without_waiting_even_once_it_ended(
    loop: str,
) -> None:
    # The notifier's thread hands notifications over with call_soon: one
    # that arrives as the worker's event loop ends must not wait forever.
    ran: list[str] = []

    async def hand_over_from_a_thread() -> anyio.lowlevel.EventLoopToken:
        token = anyio.lowlevel.current_token()
        done = anyio.Event()

        def on_the_loop() -> None:
            anyio.current_time()  # anyio code works there (a worker's stop() uses it)
            ran.append("run")
            done.set()

        await anyio.to_thread.run_sync(call_soon, token, on_the_loop)
        await done.wait()
        return token

    token = anyio.run(hand_over_from_a_thread, backend=loop)
    call_soon(token, lambda: ran.append("after the end"))  # returns; never runs
    assert ran == ["run"]


@pytest.mark.parametrize("others_return", [False, True], ids=["nothing-returns", "others-return"])
async def test_a_stalled_call_is_explained_by_whether_the_database_answers_other_calls(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, others_return: bool
) -> None:
    from pgqueue.aio.worker import calls as calls_module

    monkeypatch.setattr(calls_module, "STALL_WARNING", 0.05)
    fake = FakeQueue()
    gate = fake.hold("heartbeat")
    entered = fake.started("heartbeat")
    calls = Calls("w1", fake.table)
    logged = anyio.Event()

    class Stalled(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "heartbeat waiting on the database" in record.getMessage():
                logged.set()

    async def heartbeat() -> None:
        await calls("heartbeat", fake.heartbeat, [], worker="w1")

    stalled = Stalled()
    logging.getLogger("pgqueue.worker").addHandler(stalled)
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(calls.watch_stalls)
            tg.start_soon(heartbeat)
            await entered.wait()
            if others_return:  # as when the heartbeat waits on a lock
                await calls("looking for cancels", fake.cancel_requests, [])
            await logged.wait()
            gate.set()
            tg.cancel_scope.cancel()
    logging.getLogger("pgqueue.worker").removeHandler(stalled)
    if others_return:
        assert f"other calls returned meanwhile, so a lock held on {fake.table}" in caplog.text
        assert "refuses connections" not in caplog.text
    else:
        assert "the server cannot be reached or refuses connections" in caplog.text
        assert "pg_locks" not in caplog.text
