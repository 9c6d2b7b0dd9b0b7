"""Unique jobs (SPEC §5, docs/unique.md): each scope, each ``on_duplicate``, the
outcomes that must never collide with a newer duplicate, concurrent enqueues,
operator retries, and bad input.

Windows (``unique_for``) run on the database's clock; a test ends one by
moving its lease's ``expires_at`` back rather than by sleeping.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from psycopg import sql

import pgqueue
from pgqueue import DuplicateJob, JobSpec, JobStatus
from pgqueue.core.migrations import MIGRATIONS, REQUIRED_COLUMNS, SchemaNames
from pgqueue.core.ops import QueueCore
from pgqueue.core.plans import drive
from pgqueue.core.sql import Statements
from pgqueue.core.states import Event

from ..backends import open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# A deadline for "it happened at all", never a performance claim.
PATIENCE = 20
LATER = timedelta(hours=1)
WINDOW = timedelta(hours=1)
SCOPES = ("queued", "active")


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


def leases(table: str) -> sql.Identifier:
    return sql.Identifier(f"{table}_unique_leases")


def end_window(raw: Raw, table: str, key: str) -> None:
    """Make the window of ``key`` run out now, by the database's clock."""
    raw.conn.execute(
        sql.SQL("UPDATE {} SET expires_at = now() - interval '1 microsecond'"
                " WHERE unique_key = %s").format(leases(table)),
        (key,),
    )  # fmt: skip


async def claim_one(queue: Any, job_id: int) -> pgqueue.Job:
    jobs: list[pgqueue.Job] = await queue.claim(1, worker="w-1")
    assert [j.id for j in jobs] == [job_id]
    return jobs[0]


async def kill(queue: Any, job_id: int) -> None:
    """Claim the job and fail it on its last attempt (it must be max_attempts=1)."""
    job = await claim_one(queue, job_id)
    assert await queue.fail(job, "boom") is JobStatus.DEAD


# -- "queued" -------------------------------------------------------------------


async def test_queued_duplicate_of_a_waiting_job_returns_its_id_and_writes_nothing(
    queue: Any, raw: Raw
) -> None:
    first = await queue.enqueue("sync_account", {"v": 1}, unique_key="account:7")
    again = await queue.enqueue("sync_account", {"v": 2}, unique_key="account:7")
    assert again == first
    assert raw.rows("SELECT id, payload, unique_key, unique_scope FROM {table}") == [
        (first, {"v": 1}, "account:7", "queued")
    ]
    assert (await queue.get(first)).unique_key == "account:7"


async def test_queued_duplicate_of_a_delayed_job_is_still_a_duplicate(queue: Any) -> None:
    first = await queue.enqueue("k", unique_key="a", delay=LATER)
    assert await queue.enqueue("k", unique_key="a") == first


async def test_queued_key_is_free_again_once_its_job_started(queue: Any, raw: Raw) -> None:
    first = await queue.enqueue("k", unique_key="a")
    await claim_one(queue, first)
    second = await queue.enqueue("k", unique_key="a")
    assert second != first
    assert raw.rows("SELECT id, status FROM {table} ORDER BY id") == [
        (first, "running"),
        (second, "pending"),
    ]
    # And the new one holds the key now.
    assert await queue.enqueue("k", unique_key="a") == second


async def test_queued_job_failed_and_waiting_for_its_retry_does_not_hold_the_key(
    queue: Any, raw: Raw
) -> None:
    first = await queue.enqueue("k", {"n": 1}, unique_key="a")
    job = await claim_one(queue, first)
    assert await queue.fail(job, "boom", retry_in=timedelta(0)) is JobStatus.PENDING
    assert raw.rows("SELECT status, attempts FROM {table} WHERE id = %s", first) == [("pending", 1)]
    second = await queue.enqueue("k", {"n": 2}, unique_key="a")
    assert second != first
    # Both wait; a claim takes both.
    assert sorted(j.id for j in await queue.claim(10, worker="w-2")) == [first, second]


async def test_failure_of_a_started_queued_job_never_collides_with_a_newer_duplicate(
    queue: Any, raw: Raw
) -> None:
    # The duplicate is enqueued while the first runs; then the first fails,
    # is reaped, and fails again: every write succeeds and both jobs live on.
    first = await queue.enqueue("k", unique_key="a", max_attempts=5)
    job = await claim_one(queue, first)
    second = await queue.enqueue("k", unique_key="a", delay=LATER)
    assert second != first
    assert await queue.fail(job, "boom", retry_in=timedelta(0)) is JobStatus.PENDING
    job = await claim_one(queue, first)
    raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour' WHERE id = %s", first)
    assert await queue.reap(timedelta(minutes=5)) == [first]
    job = await claim_one(queue, first)
    assert await queue.fail(job, "boom", retry_in=timedelta(0)) is JobStatus.PENDING
    assert raw.rows("SELECT id, status, attempts FROM {table} ORDER BY id") == [
        (first, "pending", 3),
        (second, "pending", 0),
    ]
    # The newer one still holds the key.
    assert await queue.enqueue("k", unique_key="a") == second


async def test_released_queued_job_does_not_collide_with_a_newer_duplicate(
    queue: Any, raw: Raw
) -> None:
    # A worker that stops gives back the jobs it claimed and did not start:
    # their attempt is returned, but a "queued" job keeps one, so that it
    # stays out of the key's index beside the duplicate enqueued meanwhile.
    first = await queue.enqueue("k", unique_key="a")
    job = await claim_one(queue, first)
    second = await queue.enqueue("k", unique_key="a")
    release = queue.core.failure(job, None, event=Event.RELEASE)
    done, written = await queue._settle([], [release], worker=job.locked_by)
    assert (done, written) == ([], {first: JobStatus.PENDING})
    assert raw.rows("SELECT id, status, attempts FROM {table} ORDER BY id") == [
        (first, "pending", 1),
        (second, "pending", 0),
    ]
    assert await queue.enqueue("k", unique_key="a") == second


async def test_released_queued_job_without_a_duplicate_gives_the_key_up(queue: Any) -> None:
    # A claim starts a "queued" job for good: once released, it no longer
    # holds the key, even with no duplicate waiting.
    first = await queue.enqueue("k", unique_key="a")
    job = await claim_one(queue, first)
    release = queue.core.failure(job, None, event=Event.RELEASE)
    await queue._settle([], [release], worker=job.locked_by)
    assert await queue.enqueue("k", unique_key="a") != first


async def test_released_active_job_gets_its_attempt_back_and_keeps_the_key(
    queue: Any, raw: Raw
) -> None:
    first = await queue.enqueue("k", unique_key="a", unique="active")
    job = await claim_one(queue, first)
    release = queue.core.failure(job, None, event=Event.RELEASE)
    await queue._settle([], [release], worker=job.locked_by)
    assert raw.rows("SELECT status, attempts FROM {table}") == [("pending", 0)]
    assert await queue.enqueue("k", unique_key="a", unique="active") == first


# -- "active" -------------------------------------------------------------------


async def test_active_key_is_held_while_its_job_waits_or_runs(queue: Any, raw: Raw) -> None:
    first = await queue.enqueue("k", unique_key="a", unique="active", max_attempts=2)
    assert await queue.enqueue("k", unique_key="a", unique="active") == first
    job = await claim_one(queue, first)
    assert await queue.enqueue("k", unique_key="a", unique="active") == first
    # Failed and waiting for its retry: still active.
    assert await queue.fail(job, "boom", retry_in=LATER) is JobStatus.PENDING
    assert await queue.enqueue("k", unique_key="a", unique="active") == first
    assert raw.count() == 1


async def test_active_key_is_free_once_its_job_succeeded(queue: Any, raw: Raw) -> None:
    first = await queue.enqueue("k", unique_key="a", unique="active")
    await claim_one(queue, first)
    assert await queue.complete(first) == 1
    second = await queue.enqueue("k", unique_key="a", unique="active")
    assert second != first
    assert raw.rows("SELECT id FROM {table}") == [(second,)]


async def test_active_key_is_free_once_its_job_is_dead(queue: Any, raw: Raw) -> None:
    first = await queue.enqueue("k", unique_key="a", unique="active", max_attempts=1)
    await kill(queue, first)
    second = await queue.enqueue("k", unique_key="a", unique="active")
    assert second != first
    assert raw.rows("SELECT id, status FROM {table} ORDER BY id") == [
        (first, "dead"),
        (second, "pending"),
    ]


async def test_active_key_is_free_once_its_job_died_by_its_lease(queue: Any, raw: Raw) -> None:
    first = await queue.enqueue("k", unique_key="a", unique="active", max_attempts=1)
    await claim_one(queue, first)
    raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour'")
    assert await queue.reap(timedelta(minutes=5)) == []
    assert raw.rows("SELECT status FROM {table}") == [("dead",)]
    assert await queue.enqueue("k", unique_key="a", unique="active") != first


# -- scopes and keys -------------------------------------------------------------


async def test_scopes_are_separate_key_spaces(queue: Any) -> None:
    # One key in each scope: three holders, none a duplicate of another.
    queued = await queue.enqueue("k", unique_key="a", unique="queued")
    active = await queue.enqueue("k", unique_key="a", unique="active")
    window = await queue.enqueue("k", unique_key="a", unique_for=WINDOW)
    assert len({queued, active, window}) == 3
    assert await queue.enqueue("k", unique_key="a", unique="queued") == queued
    assert await queue.enqueue("k", unique_key="a", unique="active") == active
    assert await queue.enqueue("k", unique_key="a", unique_for=WINDOW) == window


async def test_a_key_is_unique_across_queues_and_kinds(queue: Any, raw: Raw) -> None:
    first = await queue.enqueue("email", unique_key="a", queue="mail")
    assert await queue.enqueue("report", unique_key="a", queue="reports") == first
    assert raw.rows("SELECT kind, queue FROM {table}") == [("email", "mail")]


async def test_jobs_without_a_key_are_never_duplicates(queue: Any, raw: Raw) -> None:
    ids = {await queue.enqueue("k", {"same": True}) for _ in range(3)}
    assert len(ids) == 3
    assert raw.count("unique_key IS NULL AND unique_scope IS NULL") == 3


# -- on_duplicate ----------------------------------------------------------------


@pytest.mark.parametrize("scope", SCOPES)
async def test_raise_names_the_existing_job_and_writes_nothing(
    queue: Any, raw: Raw, scope: str
) -> None:
    first = await queue.enqueue("k", {"v": 1}, unique_key="a", unique=scope)
    with pytest.raises(DuplicateJob) as caught:
        await queue.enqueue("k", {"v": 2}, unique_key="a", unique=scope, on_duplicate="raise")
    assert caught.value.existing_id == first
    assert caught.value.unique_key == "a"
    assert str(first) in str(caught.value)
    assert raw.rows("SELECT id, payload FROM {table}") == [(first, {"v": 1})]


@pytest.mark.parametrize("scope", SCOPES)
async def test_raise_does_nothing_when_the_key_is_free(queue: Any, scope: str) -> None:
    job_id = await queue.enqueue("k", unique_key="a", unique=scope, on_duplicate="raise")
    assert (await queue.get(job_id)).status is JobStatus.PENDING


@pytest.mark.parametrize("scope", SCOPES)
async def test_replace_gives_the_waiting_job_the_new_payload_and_run_at(
    queue: Any, raw: Raw, scope: str
) -> None:
    first = await queue.enqueue("k", {"v": 1}, unique_key="a", unique=scope, delay=LATER)
    assert await queue.claim(10, worker="w") == []  # not due
    again = await queue.enqueue("k", {"v": 2}, unique_key="a", unique=scope, on_duplicate="replace")
    assert again == first
    assert raw.rows("SELECT id, payload, run_at <= now() FROM {table}") == [(first, {"v": 2}, True)]
    [job] = await queue.claim(10, worker="w")
    assert (job.id, job.payload) == (first, {"v": 2})


async def test_replace_keeps_what_it_does_not_replace(queue: Any, raw: Raw) -> None:
    # Only payload and run_at change: kind, queue, priority and max_attempts
    # stay the waiting job's.
    first = await queue.enqueue("k", 1, unique_key="a", queue="q1", priority=5, max_attempts=2)
    await queue.enqueue("other", 2, unique_key="a", queue="q2", priority=-5, max_attempts=9,
                        on_duplicate="replace")  # fmt: skip
    assert raw.rows("SELECT id, kind, payload, queue, priority, max_attempts FROM {table}") == [
        (first, "k", 2, "q1", 5, 2)
    ]


async def test_replace_leaves_a_running_active_job_alone_and_returns_its_id(
    queue: Any, raw: Raw
) -> None:
    first = await queue.enqueue("k", {"v": 1}, unique_key="a", unique="active")
    await claim_one(queue, first)
    again = await queue.enqueue(
        "k", {"v": 2}, unique_key="a", unique="active", on_duplicate="replace"
    )
    assert again == first
    assert raw.rows("SELECT id, status, payload FROM {table}") == [(first, "running", {"v": 1})]


async def test_replace_sets_a_run_at_given_outright(queue: Any, raw: Raw) -> None:
    first = await queue.enqueue("k", unique_key="a")
    when = datetime(2031, 1, 1, tzinfo=UTC)
    await queue.enqueue("k", unique_key="a", run_at=when, on_duplicate="replace")
    assert raw.rows("SELECT id, run_at FROM {table}") == [(first, when)]


# -- unique_for ------------------------------------------------------------------


async def test_window_holds_the_key_even_after_its_job_succeeded(
    queue: Any, raw: Raw, table: str
) -> None:
    first = await queue.enqueue("digest", unique_key="daily", unique_for=WINDOW)
    assert raw.rows("SELECT unique_scope FROM {table}") == [("window",)]
    await claim_one(queue, first)
    assert await queue.complete(first) == 1
    assert raw.count() == 0
    # The row is gone; the lease is not.
    assert await queue.enqueue("digest", unique_key="daily", unique_for=WINDOW) == first
    with pytest.raises(DuplicateJob) as caught:
        await queue.enqueue("digest", unique_key="daily", unique_for=WINDOW, on_duplicate="raise")
    assert caught.value.existing_id == first
    assert raw.count() == 0


async def test_window_holds_the_key_whatever_the_first_jobs_state(queue: Any) -> None:
    first = await queue.enqueue("k", unique_key="w", unique_for=WINDOW, max_attempts=1)
    assert await queue.enqueue("k", unique_key="w", unique_for=WINDOW) == first
    await claim_one(queue, first)
    assert await queue.enqueue("k", unique_key="w", unique_for=WINDOW) == first
    job = await queue.get(first)
    assert await queue.fail(job, "boom") is JobStatus.DEAD
    assert await queue.enqueue("k", unique_key="w", unique_for=WINDOW) == first


async def test_window_ignores_the_scope(queue: Any) -> None:
    # With unique_for only the window counts: "active" or "queued" alike.
    first = await queue.enqueue("k", unique_key="w", unique_for=WINDOW, unique="active")
    await claim_one(queue, first)
    assert await queue.complete(first) == 1
    assert await queue.enqueue("k", unique_key="w", unique_for=WINDOW, unique="queued") == first


async def test_after_the_window_a_new_job_is_accepted(queue: Any, raw: Raw, table: str) -> None:
    first = await queue.enqueue("k", unique_key="w", unique_for=WINDOW)
    end_window(raw, table, "w")
    second = await queue.enqueue("k", unique_key="w", unique_for=WINDOW)
    assert second != first
    # Both jobs are there: the window limits enqueues, it deletes nothing.
    assert raw.rows("SELECT id FROM {table} ORDER BY id") == [(first,), (second,)]
    # And the new window is the second job's.
    assert await queue.enqueue("k", unique_key="w", unique_for=WINDOW) == second
    with raw.conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT job_id FROM {}").format(leases(table)))
        assert cur.fetchall() == [(second,)]


async def test_a_tiny_window_runs_out_on_the_databases_clock(queue: Any, raw: Raw) -> None:
    first = await queue.enqueue("k", unique_key="w", unique_for=timedelta(microseconds=1))
    # Wait for the database's clock to move past the window (no client clock involved).
    with anyio.fail_after(PATIENCE):
        while raw.one(  # noqa: ASYNC110 - the condition lives in the database
            "SELECT now() <= min(created_at) + interval '1 microsecond' FROM {table}"
        ):
            await anyio.sleep(0.001)
    assert await queue.enqueue("k", unique_key="w", unique_for=timedelta(microseconds=1)) != first


async def test_replace_within_a_window_updates_a_waiting_holder(queue: Any, raw: Raw) -> None:
    first = await queue.enqueue("k", {"v": 1}, unique_key="w", unique_for=WINDOW, delay=LATER)
    again = await queue.enqueue("k", {"v": 2}, unique_key="w", unique_for=WINDOW,
                                on_duplicate="replace")  # fmt: skip
    assert again == first
    assert raw.rows("SELECT id, payload, run_at <= now() FROM {table}") == [(first, {"v": 2}, True)]


async def test_replace_within_a_window_of_a_finished_holder_writes_nothing(
    queue: Any, raw: Raw
) -> None:
    first = await queue.enqueue("k", {"v": 1}, unique_key="w", unique_for=WINDOW)
    await claim_one(queue, first)
    await queue.complete(first)
    again = await queue.enqueue("k", {"v": 2}, unique_key="w", unique_for=WINDOW,
                                on_duplicate="replace")  # fmt: skip
    assert again == first
    assert raw.count() == 0


async def test_reaper_prunes_leases_long_past_their_window(
    queue: Any, raw: Raw, table: str
) -> None:
    await queue.enqueue("k", unique_key="old", unique_for=WINDOW)
    await queue.enqueue("k", unique_key="new", unique_for=WINDOW)
    raw.conn.execute(
        sql.SQL("UPDATE {} SET expires_at = now() - interval '1 hour' WHERE unique_key = 'old'")
        .format(leases(table))
    )  # fmt: skip
    await queue.reap(timedelta(minutes=5))
    with raw.conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT unique_key FROM {}").format(leases(table)))
        assert cur.fetchall() == [("new",)]


async def test_unique_jobs_work_on_a_table_named_with_capitals(
    dsn: str, table: str, backend: str
) -> None:
    # The window's lease takes the job's id from the table's sequence,
    # found by the table's name: a quoted one keeps its capitals.
    name = f"Caps_{table}"
    async with open_queue(backend, dsn, table=name) as q:
        await q.install()
        try:
            first = await q.enqueue("k", unique_key="w", unique_for=WINDOW)
            assert await q.enqueue("k", unique_key="w", unique_for=WINDOW) == first
            ids = await q.enqueue_many([("k", 1), JobSpec("k", unique_key="w", unique_for=WINDOW)])
            assert ids[1] == first
            assert (await q.get(ids[0])).payload == 1
        finally:
            await q.uninstall()


# -- enqueue_many ----------------------------------------------------------------


async def test_enqueue_many_mixes_unique_and_plain_jobs_and_returns_ids_in_order(
    queue: Any, raw: Raw
) -> None:
    held = await queue.enqueue("k", "held", unique_key="a")
    ids = await queue.enqueue_many(
        [
            ("plain", 1),
            JobSpec("k", "dup", unique_key="a"),
            JobSpec("k", "new", unique_key="b", unique="active"),
            ("plain", 2),
            JobSpec("k", "win", unique_key="c", unique_for=WINDOW),
        ]
    )
    assert len(ids) == 5 and ids[1] == held
    stored = dict(raw.rows("SELECT id, payload FROM {table}"))
    assert [stored[i] for i in ids] == [1, "held", "new", 2, "win"]
    assert raw.count() == 5


async def test_enqueue_many_dedups_duplicates_inside_one_batch(queue: Any, raw: Raw) -> None:
    ids = await queue.enqueue_many(
        [
            JobSpec("k", 1, unique_key="a"),
            JobSpec("k", 2, unique_key="b"),
            JobSpec("k", 3, unique_key="a"),
            JobSpec("k", 4, unique_key="a", on_duplicate="replace"),
            JobSpec("k", 5, unique_key="w", unique_for=WINDOW),
            JobSpec("k", 6, unique_key="w", unique_for=WINDOW),
        ]
    )
    assert ids[0] == ids[2] == ids[3] and ids[4] == ids[5]
    assert len(set(ids)) == 3
    assert sorted(raw.rows("SELECT payload FROM {table}")) == [(2,), (4,), (5,)]


async def test_enqueue_many_with_a_raising_duplicate_writes_none_of_the_batch(
    queue: Any, raw: Raw
) -> None:
    held = await queue.enqueue("k", unique_key="a")
    with pytest.raises(DuplicateJob) as caught:
        await queue.enqueue_many(
            [("plain", 1), JobSpec("k", unique_key="b"),
             JobSpec("k", unique_key="a", on_duplicate="raise")]
        )  # fmt: skip
    assert caught.value.existing_id == held
    assert raw.rows("SELECT id FROM {table}") == [(held,)]


async def test_enqueue_many_of_a_large_batch_keeps_unique_jobs_unique(queue: Any, raw: Raw) -> None:
    # Past the COPY threshold, the plain jobs go by COPY; the unique ones still one by one.
    specs: list[Any] = [("plain", i) for i in range(300)]
    specs += [JobSpec("k", i, unique_key=f"key-{i % 3}") for i in range(9)]
    ids = await queue.enqueue_many(specs)
    assert len(set(ids[300:])) == 3
    assert raw.count() == 303


def test_enqueue_many_writes_unique_jobs_in_the_order_of_their_keys() -> None:
    # Two batches that share keys then take them in one order and never
    # deadlock; the ids still come back in the order of the specs, and
    # equal keys keep theirs (a later "replace" wins). No database: the plan.
    core = QueueCore("jobs")
    specs: list[Any] = [
        JobSpec("k", 1, unique_key="b"),
        ("plain", 2),
        JobSpec("k", 3, unique_key="a", unique="active"),
        JobSpec("k", 4, unique_key="a"),
        JobSpec("k", 5, unique_key="b", on_duplicate="replace"),
    ]
    written: list[tuple[str, Any]] = []
    ids = iter(range(100, 200))

    def perform(step: Any) -> list[tuple[Any, ...]]:
        if step.query == core.sql.enqueues.allocate_ids:
            return [(datetime.now(UTC), [next(ids) for _ in range(step.params[1])])]
        if step.query in core.sql.enqueues.unique_inserts.values():
            written.append((step.params["unique_key"], step.params["payload"]))
            return [(next(ids),)]
        return []

    out = drive(core.enqueue_many(specs).plan, perform)
    assert written == [("a", "3"), ("a", "4"), ("b", "1"), ("b", "5")]
    assert out == [103, 100, 101, 102, 104]


# -- in the caller's transaction, and concurrent enqueues -------------------------


@pytest.mark.parametrize("how", ["queued", "active", "window"])
async def test_rolled_back_unique_enqueue_leaves_the_key_free(
    queue: Any, business: Any, raw: Raw, how: str
) -> None:
    rule = unique_rule(how)
    with pytest.raises(Rollback):
        async with business.transaction() as conn:
            await queue.enqueue("k", unique_key="a", conn=conn, **rule)
            raise Rollback
    assert raw.count() == 0
    job_id = await queue.enqueue("k", unique_key="a", **rule)
    assert raw.rows("SELECT id FROM {table}") == [(job_id,)]


async def test_duplicate_inside_the_callers_transaction_returns_the_job_of_that_transaction(
    queue: Any, business: Any, raw: Raw
) -> None:
    async with business.transaction() as conn:
        first = await queue.enqueue("k", 1, unique_key="a", conn=conn)
        assert await queue.enqueue("k", 2, unique_key="a", conn=conn) == first
    assert raw.rows("SELECT id, payload FROM {table}") == [(first, 1)]


def unique_rule(how: str) -> dict[str, Any]:
    return {"unique_for": WINDOW} if how == "window" else {"unique": how}


async def wait_for_lock_wait(raw: Raw, table: str) -> None:
    """Until a statement on ``table`` waits for a lock (another transaction)."""
    with anyio.fail_after(PATIENCE):
        while not raw.rows(  # noqa: ASYNC110 - the condition lives in the database
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            f"%{table}%",
        ):
            await anyio.sleep(0.01)


@pytest.mark.parametrize("how", ["queued", "active", "window"])
@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_concurrent_enqueue_waits_for_an_open_duplicate_and_follows_its_outcome(
    queue: Any, business: Any, raw: Raw, table: str, how: str, outcome: str
) -> None:
    rule = unique_rule(how)
    second: list[int] = []

    async def enqueue_second() -> None:
        second.append(await queue.enqueue("k", "second", unique_key="a", **rule))

    async with anyio.create_task_group() as tg:
        with pytest.raises(Rollback) if outcome == "rollback" else nullcontext():
            async with business.transaction() as conn:
                first = await queue.enqueue("k", "first", unique_key="a", conn=conn, **rule)
                tg.start_soon(enqueue_second)
                # The second enqueue waits for the first's transaction to end.
                await wait_for_lock_wait(raw, table)
                assert second == []
                if outcome == "rollback":
                    raise Rollback
        # The task group waits for the second enqueue here.
    [got] = second
    rows = raw.rows("SELECT id, payload FROM {table}")
    if outcome == "commit":
        assert got == first
        assert rows == [(first, "first")]
    else:
        assert got != first
        assert rows == [(got, "second")]


# -- operator retries ------------------------------------------------------------


@pytest.mark.parametrize("scope", SCOPES)
async def test_retry_of_a_dead_job_whose_key_is_held_again_leaves_it_dead(
    queue: Any, raw: Raw, scope: str
) -> None:
    dead = await queue.enqueue("k", unique_key="a", unique=scope, max_attempts=1)
    await kill(queue, dead)
    holder = await queue.enqueue("k", unique_key="a", unique=scope)
    assert holder != dead
    assert await queue.retry([dead]) == 0
    assert await queue.retry_dead() == 0
    assert raw.rows("SELECT id, status FROM {table} ORDER BY id") == [
        (dead, "dead"),
        (holder, "pending"),
    ]


async def test_retry_of_a_dead_active_job_while_its_key_runs_leaves_it_dead(
    queue: Any, raw: Raw
) -> None:
    dead = await queue.enqueue("k", unique_key="a", unique="active", max_attempts=1)
    await kill(queue, dead)
    holder = await queue.enqueue("k", unique_key="a", unique="active")
    await claim_one(queue, holder)
    assert await queue.retry(dead) == 0
    assert (await queue.get(dead)).status is JobStatus.DEAD


@pytest.mark.parametrize("scope", SCOPES)
async def test_retry_of_a_dead_job_whose_key_is_free_revives_it_as_the_holder(
    queue: Any, scope: str
) -> None:
    dead = await queue.enqueue("k", unique_key="a", unique=scope, max_attempts=1)
    await kill(queue, dead)
    assert await queue.retry(dead) == 1
    job = await queue.get(dead)
    assert (job.status, job.attempts) == (JobStatus.PENDING, 0)
    assert await queue.enqueue("k", unique_key="a", unique=scope) == dead


@pytest.mark.parametrize("scope", SCOPES)
async def test_retry_of_several_dead_jobs_with_one_key_revives_the_newest_only(
    queue: Any, raw: Raw, scope: str
) -> None:
    dead = []
    for _ in range(3):
        job_id = await queue.enqueue("k", unique_key="a", unique=scope, max_attempts=1)
        await kill(queue, job_id)
        dead.append(job_id)
    other = await queue.enqueue("k", unique_key="b", unique=scope, max_attempts=1)
    await kill(queue, other)
    assert await queue.retry([*dead, other]) == 2
    assert raw.rows("SELECT id FROM {table} WHERE status = 'pending' ORDER BY id") == [
        (dead[-1],),
        (other,),
    ]
    assert await queue.retry_dead() == 0


async def test_retry_dead_revives_one_job_per_free_key_and_every_job_without_one(
    queue: Any, raw: Raw
) -> None:
    held = await queue.enqueue("k", unique_key="held", max_attempts=1)
    await kill(queue, held)
    free = []
    for _ in range(2):
        free.append(await queue.enqueue("k", unique_key="free", max_attempts=1))
        await kill(queue, free[-1])
    plain = []
    for _ in range(2):
        plain.append(await queue.enqueue("k", max_attempts=1))
        await kill(queue, plain[-1])
    await queue.enqueue("k", unique_key="held")
    assert await queue.retry_dead() == 3
    assert raw.rows("SELECT id FROM {table} WHERE status = 'dead' ORDER BY id") == [
        (held,),
        (free[0],),
    ]


async def test_retry_tells_a_key_from_the_id_of_a_job_without_one(queue: Any, raw: Raw) -> None:
    # A plain job and a unique job whose key is the plain job's id as text
    # are two jobs, both revived.
    plain = await queue.enqueue("k", max_attempts=1)
    await kill(queue, plain)
    keyed = await queue.enqueue("k", unique_key=str(plain), max_attempts=1)
    await kill(queue, keyed)
    assert await queue.retry([plain, keyed]) == 2
    assert raw.count("status = 'pending'") == 2


async def test_retry_of_dead_jobs_with_one_key_in_two_scopes_revives_both(
    queue: Any, raw: Raw
) -> None:
    queued = await queue.enqueue("k", unique_key="a", unique="queued", max_attempts=1)
    await kill(queue, queued)
    active = await queue.enqueue("k", unique_key="a", unique="active", max_attempts=1)
    await kill(queue, active)
    assert await queue.retry([queued, active]) == 2
    assert raw.count("status = 'pending'") == 2


async def test_retry_of_a_dead_window_job_revives_it_whatever_the_lease(
    queue: Any, raw: Raw
) -> None:
    # The window limits enqueues; an operator's retry is not an enqueue.
    dead = await queue.enqueue("k", unique_key="w", unique_for=WINDOW, max_attempts=1)
    await kill(queue, dead)
    assert await queue.retry(dead) == 1
    assert raw.rows("SELECT status, attempts FROM {table}") == [("pending", 0)]


# -- bad input -------------------------------------------------------------------

BAD_UNIQUE: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("unknown scope", {"unique_key": "a", "unique": "running"}, ValueError, "unique must be"),
    ("window as a scope", {"unique_key": "a", "unique": "window"}, ValueError, "unique must be"),
    ("scope without a key", {"unique": "forever"}, ValueError, "unique must be"),
    ("unknown on_duplicate", {"unique_key": "a", "on_duplicate": "ignore"}, ValueError,
     "on_duplicate"),
    ("on_duplicate without a key", {"on_duplicate": "skip"}, ValueError, "on_duplicate"),
    ("unique_for without a key", {"unique_for": WINDOW}, ValueError, "needs a unique_key"),
    ("zero unique_for", {"unique_key": "a", "unique_for": timedelta(0)}, ValueError, "positive"),
    ("negative unique_for", {"unique_key": "a", "unique_for": timedelta(seconds=-1)},
     ValueError, "positive"),
    ("unique_for in seconds", {"unique_key": "a", "unique_for": 60}, TypeError, "timedelta"),
    ("huge unique_for", {"unique_key": "a", "unique_for": timedelta.max}, ValueError, "at most"),
    ("empty key", {"unique_key": ""}, ValueError, "empty"),
    ("non-str key", {"unique_key": 7}, TypeError, "str"),
    ("NUL in key", {"unique_key": "a\x00"}, ValueError, "NUL"),
    ("huge key", {"unique_key": "k" * 256}, ValueError, "longer"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [case[1:] for case in BAD_UNIQUE],
    ids=[case[0] for case in BAD_UNIQUE],
)
async def test_bad_unique_arguments_raise_and_write_nothing(
    queue: Any, raw: Raw, table: str, kwargs: dict[str, Any], error: type[Exception], words: str
) -> None:
    held = await queue.enqueue("k", unique_key="a", unique_for=WINDOW)
    before = raw.rows("SELECT * FROM {table}")
    with pytest.raises(error, match=words):
        await queue.enqueue("k", **kwargs)
    with pytest.raises(error, match=words):
        await queue.enqueue_many([("plain", 1), JobSpec("k", **kwargs)])
    assert raw.rows("SELECT * FROM {table}") == before
    with raw.conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT job_id FROM {}").format(leases(table)))
        assert cur.fetchall() == [(held,)]


# -- the page --------------------------------------------------------------------

PAGE = Path(__file__).resolve().parents[2] / "docs" / "unique.md"


def normalize(text: str) -> str:
    return " ".join(re.sub(r"--[^\n]*", "", text).split()).rstrip(";")


def rendered_statements() -> set[str]:
    """Every statement `Statements` renders for the default table, and the DDL of
    the migration that brought unique jobs."""
    statements = Statements("pgqueue_jobs")
    found: list[bytes] = [v for v in statements.every().values() if isinstance(v, bytes)]
    found += statements.enqueues.unique_inserts.values()
    found += statements.enqueues.unique_holders.values()
    names = SchemaNames.for_table("pgqueue_jobs")
    plan = next(m for m in MIGRATIONS if m.version == 7).apply(names)
    try:
        step = next(plan)
        while True:
            found.append(step.query)
            # What a fresh database answers: a queue's columns, nothing else.
            step = plan.send(
                list(REQUIRED_COLUMNS.items()) if b"pg_attribute" in step.query else []
            )
    except StopIteration:
        pass
    return {normalize(s.decode()) for s in found}


def test_the_sql_docs_unique_md_shows_is_the_sql_the_code_runs() -> None:
    blocks = re.findall(r"```sql\n(.*?)```", PAGE.read_text(), flags=re.S)
    shown = [normalize(s) for block in blocks for s in block.split(";\n") if normalize(s)]
    assert len(shown) >= 8
    rendered = rendered_statements()
    for statement in shown:
        # A whole statement, or a part of one (a CTE of a bigger statement).
        assert statement in rendered or any(statement in r for r in rendered), statement[:80]
