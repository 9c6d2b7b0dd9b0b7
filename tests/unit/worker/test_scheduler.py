"""The worker's `Scheduler` against `FakeQueue`: retries, stop, a lost row. No database.

What a tick writes, and that racing workers write one job, is the behaviour
suite's business (tests/behaviour/test_schedules.py); here, the loop.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from pgqueue.aio.worker import scheduler as scheduler_module
from pgqueue.aio.worker.calls import Calls
from pgqueue.aio.worker.reporter import Reporter
from pgqueue.aio.worker.scheduler import Scheduler
from pgqueue.core.backoff import Backoff
from pgqueue.core.schedules import validate_schedule

from .fake import FakeQueue

pytestmark = pytest.mark.anyio

PATIENCE = 5  # a deadline for "it happened at all", never a performance claim


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    quick = Backoff(base=timedelta(milliseconds=1), cap=timedelta(milliseconds=100), jitter=0.5)
    monkeypatch.setattr(scheduler_module, "RETRY_BACKOFF", quick)


def scheduler(fake: FakeQueue, **options: object) -> Scheduler:
    options.setdefault("every", timedelta(seconds=1))
    schedule = validate_schedule("beat", **options)
    calls = Calls("w", fake.table, deadline=PATIENCE)
    return Scheduler([schedule], fake, calls, Reporter("w", fake.table, []), "w")


async def test_registration_is_retried_after_database_errors_and_the_due_tick_enqueued(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeQueue()
    fake.failing["register_schedules"] = 2
    fake.last_ticks["beat"] = datetime.now(UTC) - timedelta(seconds=30)  # down for 30 s
    ticked = fake.started("tick_schedule")
    s = scheduler(fake)
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.run)
            await ticked.wait()
            s.stop()
    assert fake.calls["register_schedules"] == 3
    assert caplog.text.count("scheduler failed (register_schedules failed") == 2
    [job] = fake.jobs.values()
    assert job.kind == "beat"
    assert fake.last_ticks["beat"].microsecond == 0  # a tick, not the time of a look
    assert "missed its ticks from" in caplog.text  # the 29 older ones, skipped


async def test_stop_ends_the_scheduler_at_once_while_it_sleeps() -> None:
    fake = FakeQueue()
    looked = fake.started("schedule_clock")
    s = scheduler(fake, every=None, cron="0 0 1 1 *")
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.run)
            await looked.wait()
            s.stop()
    assert fake.jobs == {}


async def test_a_row_deleted_under_a_running_scheduler_is_registered_again() -> None:
    fake = FakeQueue()
    s = scheduler(fake)
    with anyio.fail_after(PATIENCE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.run)
            await fake.started("schedule_clock").wait()
            del fake.last_ticks["beat"]
            while fake.calls["register_schedules"] < 2:
                await fake.started("register_schedules").wait()
            s.stop()
    assert "beat" in fake.last_ticks
