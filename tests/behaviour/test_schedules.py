"""Schedules on sync, asyncio and trio against a real server (docs/schedules.md).

The tick statement is driven directly where a race must be forced (a row
lock held by the test, released once every contender waits on it); the
worker runs its scheduler where the whole loop is under test. Handlers are
plain functions that signal the test through `threading.Event`s.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import pytest
from psycopg import sql

import pgqueue
from pgqueue import JobStatus
from pgqueue.core.cron import CronError
from pgqueue.core.schedules import Schedule, validate_schedule

from ..backends import WorkerUnderTest, open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# Generous: a deadline for "it happened at all", never a performance claim.
PATIENCE = 20
# Ticks far enough apart that none passes while a test runs (but on New Year's midnight).
YEARLY = "0 0 1 1 *"


class Schedules:
    """The rows of the queue's ``<table>_schedules``, seen through the test's own connection."""

    def __init__(self, raw: Raw, table: str) -> None:
        self.raw = raw
        self.ident = sql.Identifier(f"{table}_schedules")

    def rows(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        composed = sql.SQL(query).format(schedules=self.ident)
        cur = self.raw.conn.execute(composed, params or None)
        return cur.fetchall() if cur.description else []

    def last_tick(self, name: str) -> datetime:
        [(tick,)] = self.rows("SELECT last_tick FROM {schedules} WHERE name = %s", name)
        return tick  # type: ignore[no-any-return]

    def set_last_tick(self, name: str, tick: datetime) -> None:
        self.rows("UPDATE {schedules} SET last_tick = %s WHERE name = %s", tick, name)


@pytest.fixture
def schedules(raw: Raw, table: str) -> Schedules:
    return Schedules(raw, table)


async def wait_until(condition: Any, what: str) -> None:
    """Re-check a database condition until it holds."""
    with anyio.fail_after(PATIENCE):
        while not condition():  # noqa: ASYNC110 - the condition lives in the database
            await anyio.sleep(0.05)


async def wait_for(event: threading.Event) -> None:
    assert await anyio.to_thread.run_sync(event.wait, PATIENCE)


def db_now(raw: Raw) -> datetime:
    return raw.one("SELECT now()")  # type: ignore[no-any-return]


async def registered(q: Any, schedules: Schedules, /, **options: Any) -> Schedule:
    """A schedule written into the table as a worker does, its last tick ten years back."""
    options.setdefault("cron", YEARLY)
    schedule = validate_schedule(options.pop("kind", "report"), **options)
    await q.register_schedules([schedule])
    schedules.set_last_tick(schedule.name, db_now(schedules.raw) - timedelta(days=3660))
    return schedule


def latest_yearly_tick(raw: Raw) -> datetime:
    return datetime(db_now(raw).astimezone(UTC).year, 1, 1, tzinfo=UTC)


# -- the tick statement ---------------------------------------------------------


async def test_racing_ticks_of_one_schedule_enqueue_exactly_one_job(
    queue: Any, raw: Raw, schedules: Schedules, backend: str, dsn: str, table: str
) -> None:
    schedule = await registered(queue, schedules)
    tick = latest_yearly_tick(raw)
    outcomes: list[pgqueue.core.schedules.Tick] = []
    # The test holds the schedule's row, so that every contender's statement
    # queues on its lock and must recheck the row once it is released.
    holder = psycopg.connect(dsn)

    def waiting_on_the_row() -> int:
        query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        return int(raw.one(query + " AND query LIKE %s", f"%{table}_schedules%"))

    try:
        holder.execute(
            sql.SQL("SELECT FROM {} WHERE name = %s FOR UPDATE").format(schedules.ident),
            [schedule.name],
        )
        async with open_queue(backend, dsn, table=table) as other, anyio.create_task_group() as tg:
            for q in (queue, other) * 3:

                async def race(q: Any = q) -> None:
                    outcomes.append(await q.tick_schedule(schedule, tick))

                tg.start_soon(race)
            await wait_until(lambda: waiting_on_the_row() == 6, "every contender waits")
            holder.commit()
    finally:
        holder.close()
    assert sorted(o.won for o in outcomes) == [False] * 5 + [True]
    [winner] = [o for o in outcomes if o.won]
    assert raw.rows("SELECT id, kind, run_at FROM {table}") == [(winner.job_id, "report", tick)]
    assert schedules.last_tick(schedule.name) == tick


async def test_a_tick_recorded_already_or_older_than_the_last_enqueues_nothing(
    queue: Any, raw: Raw, schedules: Schedules
) -> None:
    schedule = await registered(queue, schedules)
    tick = latest_yearly_tick(raw)
    first = await queue.tick_schedule(schedule, tick)
    again = await queue.tick_schedule(schedule, tick)
    older = await queue.tick_schedule(schedule, tick.replace(year=tick.year - 1))
    assert (first.won, again.won, older.won) == (True, False, False)
    assert raw.count() == 1
    job = await queue.get(first.job_id)
    assert (job.kind, job.run_at, job.status) == ("report", tick, JobStatus.PENDING)


async def test_the_ticks_job_carries_the_schedules_payload_queue_and_priority(
    queue: Any, raw: Raw, schedules: Schedules
) -> None:
    schedule = await registered(queue, schedules, payload={"to": ["ops"]}, queue="reports",
                                priority=7, name="weekly")  # fmt: skip
    done = await queue.tick_schedule(schedule, latest_yearly_tick(raw))
    job = await queue.get(done.job_id)
    assert (job.payload, job.queue, job.priority) == ({"to": ["ops"]}, "reports", 7)
    [(last_job_id,)] = schedules.rows("SELECT last_job_id FROM {schedules}")
    assert last_job_id == done.job_id


async def test_overlap_false_skips_ticks_while_the_previous_job_is_pending_or_running(
    queue: Any, raw: Raw, schedules: Schedules
) -> None:
    schedule = await registered(queue, schedules, overlap=False)
    year = latest_yearly_tick(raw).year
    ticks = [datetime(year - n, 1, 1, tzinfo=UTC) for n in (4, 3, 2, 1, 0)]
    first = await queue.tick_schedule(schedule, ticks[0])
    pending = await queue.tick_schedule(schedule, ticks[1])
    [job] = await queue.claim(worker="w")
    running = await queue.tick_schedule(schedule, ticks[2])
    assert (first.job_id, pending.won, pending.job_id, running.won, running.job_id) == (
        job.id, True, None, True, None,
    )  # fmt: skip
    assert schedules.last_tick(schedule.name) == ticks[2]
    assert raw.count() == 1
    [(last_job_id,)] = schedules.rows("SELECT last_job_id FROM {schedules}")
    assert last_job_id == job.id  # the job still running, not a skipped tick's
    await queue.complete(job)
    after = await queue.tick_schedule(schedule, ticks[3])
    assert after.job_id is not None and raw.count() == 1


async def test_a_paused_schedule_records_its_ticks_without_jobs_and_resumes_from_now(
    queue: Any, raw: Raw, schedules: Schedules
) -> None:
    schedule = await registered(queue, schedules)
    await queue.pause_schedule(schedule.name)
    tick = latest_yearly_tick(raw)
    done = await queue.tick_schedule(schedule, tick)
    assert (done.won, done.paused, done.job_id) == (True, True, None)
    assert raw.count() == 0
    [state] = await queue.schedules()
    assert state.paused
    schedules.set_last_tick(schedule.name, tick - timedelta(days=400))
    await queue.resume_schedule(schedule.name)
    # The ticks missed while paused are not made up for.
    assert schedules.last_tick(schedule.name) >= db_now(raw) - timedelta(seconds=PATIENCE)
    assert not (await queue.schedules())[0].paused
    assert not (await queue.tick_schedule(schedule, tick)).won


async def test_trigger_enqueues_a_job_now_without_counting_as_a_tick(
    queue: Any, raw: Raw, schedules: Schedules
) -> None:
    schedule = await registered(queue, schedules, payload=[1, 2])
    last_tick = schedules.last_tick(schedule.name)
    job_id = await queue.trigger_schedule(schedule.name)
    job = await queue.get(job_id)
    assert (job.kind, job.payload, job.status) == ("report", [1, 2], JobStatus.PENDING)
    assert job.run_at <= db_now(raw)
    assert schedules.last_tick(schedule.name) == last_tick


async def test_trigger_respects_overlap_false_and_refuses_an_unknown_schedule(
    queue: Any, raw: Raw, schedules: Schedules
) -> None:
    schedule = await registered(queue, schedules, overlap=False)
    job_id = await queue.trigger_schedule(schedule.name)
    with pytest.raises(pgqueue.DuplicateJob) as raised:
        await queue.trigger_schedule(schedule.name)
    assert raised.value.existing_id == job_id
    done = await queue.tick_schedule(schedule, latest_yearly_tick(raw))
    assert done.won and done.job_id is None
    with pytest.raises(pgqueue.UnknownSchedule):
        await queue.trigger_schedule("nobody")
    with pytest.raises(pgqueue.UnknownSchedule):
        await queue.pause_schedule("nobody")
    assert raw.count() == 1


async def test_registering_again_keeps_the_last_tick_and_the_pause_and_updates_the_rest(
    queue: Any, raw: Raw, schedules: Schedules
) -> None:
    schedule = await registered(queue, schedules)
    await queue.pause_schedule(schedule.name)
    last_tick = schedules.last_tick(schedule.name)
    changed = validate_schedule("report2", name="report", every=timedelta(minutes=5),
                                payload={"v": 2})  # fmt: skip
    await queue.register_schedules([changed])
    [state] = await queue.schedules()
    assert (state.kind, state.cron, state.every, state.payload) == (
        "report2", None, timedelta(minutes=5), {"v": 2},
    )  # fmt: skip
    assert state.paused and state.last_tick == last_tick
    assert state.next_tick is not None and state.next_tick.minute % 5 == 0


async def test_a_new_schedule_starts_now_and_enqueues_no_past_tick(
    queue: Any, raw: Raw, schedules: Schedules
) -> None:
    before = db_now(raw)
    schedule = validate_schedule("report", cron=YEARLY)
    await queue.register_schedules([schedule])
    [state] = await queue.schedules()
    assert state.last_tick is not None and state.last_tick >= before
    assert not (await queue.tick_schedule(schedule, latest_yearly_tick(raw))).won
    assert raw.count() == 0


async def test_bad_schedules_raise_before_anything_is_written(
    queue: Any, raw: Raw, schedules: Schedules, backend: str
) -> None:
    worker = WorkerUnderTest(backend, queue, {})
    bad: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"cron": "61 * * * *"}, CronError, "minute 61 is out of range"),
        ({"cron": "0 0 30 2 *"}, CronError, "never occurs"),
        ({"cron": "* * * * *", "every": timedelta(minutes=1)}, ValueError, "not both"),
        ({}, ValueError, "give cron"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus_Mons"}, ValueError, "unknown time zone"),
        ({"every": timedelta(milliseconds=10)}, ValueError, "every must be from"),
        ({"every": 60}, TypeError, "every must be a timedelta"),
        ({"every": timedelta(hours=1), "tz": "Europe/Berlin"}, ValueError, "cron schedules"),
        ({"cron": "@daily", "priority": 101}, ValueError, "priority"),
        ({"cron": "@daily", "payload": {1j}}, TypeError, "JSON"),
        ({"cron": "@daily", "name": ""}, ValueError, "schedule name"),
        ({"cron": "@daily", "backfill": 0}, ValueError, "backfill"),
    ]
    for options, error, message in bad:
        with pytest.raises(error, match=message):
            worker.worker.schedule("report", **options)
    worker.worker.schedule("report", cron="@daily")
    with pytest.raises(ValueError, match="already"):
        worker.worker.schedule("report", every=timedelta(hours=1))
    with pytest.raises(ValueError, match="schedule name"):
        await queue.pause_schedule("")
    assert schedules.rows("SELECT * FROM {schedules}") == []
    assert raw.count() == 0


# -- the worker's scheduler -------------------------------------------------------


async def test_a_worker_ticking_every_second_enqueues_jobs_that_run(
    queue: Any, raw: Raw, backend: str
) -> None:
    ran: list[datetime] = []
    enough = threading.Event()

    def beat(job: pgqueue.Job) -> None:
        ran.append(job.run_at)
        if len(ran) == 3:
            enough.set()

    worker = WorkerUnderTest(backend, queue, {"beat": beat}, poll_interval=0.1)
    worker.worker.schedule("beat", every=timedelta(seconds=1), payload={"n": 1})
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_for(enough)
        worker.stop()
    assert len(set(ran)) == len(ran) >= 3
    assert all(t.microsecond == 0 for t in ran)  # whole seconds since the epoch


async def test_two_workers_running_one_schedule_enqueue_each_tick_once(
    queue: Any, raw: Raw, backend: str, dsn: str, table: str
) -> None:
    ran: list[datetime] = []
    lock = threading.Lock()
    enough = threading.Event()

    def beat(job: pgqueue.Job) -> None:
        with lock:
            ran.append(job.run_at)
            if len(ran) >= 4:
                enough.set()

    async with open_queue(backend, dsn, table=table) as other:
        workers = [WorkerUnderTest(backend, q, {"beat": beat}, poll_interval=0.1)
                   for q in (queue, other)]  # fmt: skip
        for w in workers:
            w.worker.schedule("beat", every=timedelta(seconds=1))
        async with anyio.create_task_group() as tg:
            for w in workers:
                tg.start_soon(w.run)
            await wait_for(enough)
            for w in workers:
                w.stop()
    assert len(set(ran)) == len(ran)


async def test_after_downtime_the_worker_enqueues_the_latest_missed_ticks_only(
    queue: Any, raw: Raw, schedules: Schedules, backend: str
) -> None:
    # Registered, then "down" for five years: five yearly ticks were missed.
    schedule = await registered(queue, schedules, backfill=2)
    schedules.set_last_tick(schedule.name, latest_yearly_tick(raw) - timedelta(days=5 * 366))
    # The worker serves another kind: the jobs stay in the table to be counted.
    worker = WorkerUnderTest(backend, queue, {}, kinds=["other"])
    worker.worker.schedule("report", cron=YEARLY, backfill=2)
    latest = latest_yearly_tick(raw)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await wait_until(lambda: schedules.last_tick("report") == latest, "latest tick enqueued")
        worker.stop()
    run_at = [r[0] for r in raw.rows("SELECT run_at FROM {table} ORDER BY run_at")]
    assert run_at == [latest.replace(year=latest.year - 1), latest]


async def test_a_running_worker_registers_its_schedules_and_refuses_new_ones(
    queue: Any, schedules: Schedules, backend: str
) -> None:
    worker = WorkerUnderTest(backend, queue, {}, poll_interval=0.1)
    worker.worker.schedule("report", cron=YEARLY, name="yearly")
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        try:
            await wait_until(lambda: schedules.rows("SELECT name FROM {schedules}"), "registered")
            with pytest.raises(RuntimeError, match="running"):
                worker.worker.schedule("again", every=timedelta(hours=1))
        finally:
            worker.stop()
    [state] = await queue.schedules()
    assert (state.name, state.kind, state.cron, state.every) == ("yearly", "report", YEARLY, None)


async def test_a_running_worker_registers_again_a_schedule_whose_row_lost_its_last_tick(
    queue: Any, schedules: Schedules, backend: str
) -> None:
    worker = WorkerUnderTest(backend, queue, {}, kinds=["other"], poll_interval=0.1)
    worker.worker.schedule("beat", every=timedelta(seconds=1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        try:
            await wait_until(lambda: schedules.rows("SELECT name FROM {schedules}"), "registered")
            schedules.rows("UPDATE {schedules} SET last_tick = NULL")
            await wait_until(lambda: schedules.last_tick("beat") is not None, "registered again")
        finally:
            worker.stop()
