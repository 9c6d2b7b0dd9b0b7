"""The behaviour suite: one set of tests, run on sync, asyncio and trio.

Every test here receives `queue` (awaitable methods whatever the backend)
and a real PostgreSQL table of its own.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import pytest

import pgqueue
from pgqueue import JobStatus

from ..backends import open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


# -- the one promise ----------------------------------------------------------


async def test_committed_enqueue_leaves_both_the_row_and_the_job(
    queue: Any, business: Any, raw: Raw
) -> None:
    async with business.transaction() as conn:
        [(order_id,)] = await business.execute(
            "INSERT INTO {orders} (item) VALUES ('book') RETURNING id"
        )
        job_id = await queue.enqueue("send_receipt", {"order_id": order_id}, conn=conn)

    assert await business.execute("SELECT count(*) FROM {orders}") == [(1,)]
    job = await queue.get(job_id)
    assert job is not None
    assert job.payload == {"order_id": order_id}
    assert job.status is JobStatus.PENDING


async def test_rolled_back_enqueue_leaves_neither_the_row_nor_the_job(
    queue: Any, business: Any, raw: Raw
) -> None:
    with pytest.raises(Rollback):
        async with business.transaction() as conn:
            await business.execute("INSERT INTO {orders} (item) VALUES ('book')")
            job_id = await queue.enqueue("send_receipt", {"order": 1}, conn=conn)
            assert await queue.get(job_id) is None  # not visible outside the transaction
            raise Rollback

    assert await business.execute("SELECT count(*) FROM {orders}") == [(0,)]
    assert raw.count() == 0


@pytest.mark.parametrize("size", [3, 500], ids=["insert", "copy"])
async def test_rolled_back_enqueue_many_leaves_no_job(
    queue: Any, business: Any, raw: Raw, size: int
) -> None:
    with pytest.raises(Rollback):
        async with business.transaction() as conn:
            await business.execute("INSERT INTO {orders} (item) VALUES ('crate')")
            await queue.enqueue_many([("pack", i) for i in range(size)], conn=conn)
            raise Rollback

    assert raw.count() == 0
    assert await business.execute("SELECT count(*) FROM {orders}") == [(0,)]


@pytest.mark.parametrize("size", [3, 500], ids=["insert", "copy"])
async def test_committed_enqueue_many_keeps_every_job_in_order(
    queue: Any, business: Any, raw: Raw, size: int
) -> None:
    specs = [("pack", {"n": i}) for i in range(size)]
    async with business.transaction() as conn:
        await business.execute("INSERT INTO {orders} (item) VALUES ('crate')")
        ids = await queue.enqueue_many(specs, conn=conn)

    assert len(ids) == size and ids == sorted(ids)
    stored = raw.rows("SELECT id, kind, payload FROM {table} ORDER BY id")
    assert stored == [(i, "pack", {"n": n}) for n, i in enumerate(ids)]


async def test_enqueue_without_conn_commits_the_job_itself(queue: Any, raw: Raw) -> None:
    job_id = await queue.enqueue("ping")
    assert raw.rows("SELECT id, kind, payload, status FROM {table}") == [
        (job_id, "ping", None, "pending")
    ]


async def test_enqueue_many_of_nothing_writes_nothing(queue: Any, raw: Raw) -> None:
    assert await queue.enqueue_many([]) == []
    assert raw.count() == 0


async def test_enqueue_notifies_at_commit_not_before(queue: Any, business: Any, raw: Raw) -> None:
    raw.conn.execute(queue.core.sql.listen)
    async with business.transaction() as conn:
        await queue.enqueue("send_receipt", conn=conn)
        assert list(raw.conn.notifies(timeout=0.05)) == []
    note = next(raw.conn.notifies(timeout=10, stop_after=1))
    assert (note.channel, note.payload) == (queue.core.channel, "send_receipt")


async def test_enqueue_many_sends_one_notification_per_kind(queue: Any, raw: Raw) -> None:
    raw.conn.execute(queue.core.sql.listen)
    await queue.enqueue_many([("a", i) for i in range(300)] + [("b", 1), ("b", 2)])
    notes = list(raw.conn.notifies(timeout=0.5))
    assert sorted(n.payload for n in notes) == ["a", "b"]


# -- claim ---------------------------------------------------------------------


async def test_claim_marks_jobs_running_and_counts_an_attempt(queue: Any) -> None:
    job_id = await queue.enqueue("ping", {"x": 1}, max_attempts=5)
    [job] = await queue.claim(10, worker="w-1")
    assert (job.id, job.kind, job.payload) == (job_id, "ping", {"x": 1})
    assert job.status is JobStatus.RUNNING
    assert (job.attempts, job.max_attempts) == (1, 5)
    assert job.locked_by == "w-1" and job.locked_at is not None
    assert await queue.claim(10, worker="w-2") == []


async def test_claim_takes_jobs_in_run_at_then_id_order(queue: Any) -> None:
    past = datetime.now(UTC) - timedelta(hours=1)
    late = await queue.enqueue("k", 1)
    early = await queue.enqueue("k", 2, run_at=past)
    also_early = await queue.enqueue("k", 3, run_at=past)
    jobs = await queue.claim(2)
    assert [j.id for j in jobs] == [early, also_early]
    assert [j.id for j in await queue.claim(2)] == [late]


async def test_delayed_job_is_not_claimed_before_its_run_at(queue: Any, raw: Raw) -> None:
    job_id = await queue.enqueue("later", delay=timedelta(hours=1))
    assert await queue.claim(10) == []
    raw.rows("UPDATE {table} SET run_at = now() - interval '1 second'")
    assert [j.id for j in await queue.claim(10)] == [job_id]


async def test_claim_honours_kinds(queue: Any) -> None:
    await queue.enqueue_many([("flood", i) for i in range(50)])
    mail = await queue.enqueue("mail")
    jobs = await queue.claim(5, kinds=["mail", "sms"])
    assert [j.id for j in jobs] == [mail]
    assert all(j.kind == "flood" for j in await queue.claim(100))


async def test_concurrent_claimers_never_receive_the_same_job(
    dsn: str, table: str, backend: str
) -> None:
    total, claimers = 600, 8
    seen: list[int] = []
    async with open_queue(backend, dsn, table=table, max_connections=claimers) as q:
        await q.install()
        ids = await q.enqueue_many([("work", i) for i in range(total)])

        async def claimer(n: int) -> None:
            while jobs := await q.claim(7, worker=f"claimer-{n}"):
                seen.extend(j.id for j in jobs)
                await q.complete(*jobs)

        async with anyio.create_task_group() as tg:
            for n in range(claimers):
                tg.start_soon(claimer, n)

    assert len(seen) == len(set(seen)) == total
    assert sorted(seen) == ids


async def test_claimers_on_separate_queues_never_receive_the_same_job(
    dsn: str, table: str, backend: str
) -> None:
    # Separate queue objects: separate pools, separate connections.
    total, claimers = 300, 4
    claimed: dict[int, list[int]] = {n: [] for n in range(claimers)}

    async def claimer(n: int) -> None:
        async with open_queue(backend, dsn, table=table, max_connections=1) as q:
            while jobs := await q.claim(5, worker=f"q-{n}"):
                claimed[n].extend(j.id for j in jobs)

    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        ids = await q.enqueue_many([("work", i) for i in range(total)])
    async with anyio.create_task_group() as tg:
        for n in range(claimers):
            tg.start_soon(claimer, n)

    every = [i for got in claimed.values() for i in got]
    assert sorted(every) == ids


async def test_claim_uses_the_partial_claim_index(queue: Any, raw: Raw) -> None:
    # Enough history that a scan of the table would be the planner's other choice.
    raw.rows(
        "INSERT INTO {table} (kind, payload, status, attempts) "
        "SELECT 'old', 'null', 'dead', 3 FROM generate_series(1, 20000)"
    )
    await queue.enqueue_many([("new", i) for i in range(50)])
    raw.rows("ANALYZE {table}")
    plan = await queue.explain_claim()
    assert f"{queue.table}_unlimited" in plan, plan
    # (the small tables of paused queues and of limit slots may be read whole)
    assert f"Seq Scan on {queue.table} " not in plan, plan


async def test_claim_of_an_orphan_reads_the_orphans_index_not_the_backlog(
    queue: Any, raw: Raw
) -> None:
    # A long backlog of ready jobs, none orphaned: what a busy worker looks past.
    raw.rows(
        "INSERT INTO {table} (kind, payload) SELECT 'new', 'null' FROM generate_series(1, 20000)"
    )
    raw.rows("ANALYZE {table}")
    explain = b"EXPLAIN " + queue.core.sql.claims.orphan_claims[False, False]
    plan = "\n".join(r[0] for r in raw.conn.execute(explain, {"worker": "w", "limit": 1}))
    assert f"{queue.table}_orphans" in plan, plan
    assert "Seq Scan" not in plan, plan


# -- outcomes ------------------------------------------------------------------


async def test_completed_jobs_are_deleted(queue: Any, raw: Raw) -> None:
    await queue.enqueue_many([("work", i) for i in range(1000)])
    done = 0
    while jobs := await queue.claim(100):
        done += await queue.complete(*jobs)
    assert done == 1000
    assert raw.count() == 0


async def test_complete_accepts_ids_and_ignores_jobs_that_are_not_running(
    queue: Any, raw: Raw
) -> None:
    running = await queue.enqueue("a")
    pending = await queue.enqueue("b", delay=timedelta(hours=1))
    await queue.claim(5)
    assert await queue.complete(running, pending, 999_999) == 1
    assert raw.rows("SELECT id FROM {table}") == [(pending,)]


async def test_failure_defers_below_max_attempts_and_buries_at_it(queue: Any, raw: Raw) -> None:
    job_id = await queue.enqueue("flaky", max_attempts=2)
    [job] = await queue.claim()

    assert await queue.fail(job, ValueError("boom")) is JobStatus.PENDING
    row = raw.rows("SELECT status, attempts, last_error, run_at > now(), locked_by FROM {table}")
    assert row == [("pending", 1, "ValueError: boom", True, None)]
    assert await queue.claim() == []  # backing off

    raw.rows("UPDATE {table} SET run_at = now()")
    [again] = await queue.claim()
    assert again.attempts == 2 and again.last_error == "ValueError: boom"
    assert await queue.fail(again, "boom again") is JobStatus.DEAD
    dead = await queue.get(job_id)
    assert dead.status is JobStatus.DEAD
    assert (dead.attempts, dead.last_error) == (2, "boom again")
    assert await queue.claim() == []


async def test_failure_backoff_follows_the_policy_and_retry_in_overrides_it(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    backoff = pgqueue.Backoff(base=timedelta(seconds=10), jitter=0)
    async with open_queue(backend, dsn, table=table, backoff=backoff) as q:
        await q.install()
        first, second = await q.enqueue_many([("a", 1), ("b", 2)])
        a, b = await q.claim(2)
        await q.fail(a, "x")
        await q.fail(b, "y", retry_in=timedelta(hours=2))
    delays = dict(raw.rows("SELECT id, run_at - now() FROM {table}"))
    # 10 s * 2 ** attempts(1), measured from the database's own clock.
    assert timedelta(seconds=19) < delays[first] <= timedelta(seconds=20)
    assert timedelta(hours=1, minutes=59) < delays[second] <= timedelta(hours=2)


async def test_failing_a_job_that_is_no_longer_running_raises(queue: Any) -> None:
    await queue.enqueue("a")
    [job] = await queue.claim()
    await queue.complete(job)
    with pytest.raises(pgqueue.JobNotRunning):
        await queue.fail(job, "too late")


async def test_the_longest_table_name_still_notifies(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    # 63 + 1 + 48 characters: too long for a channel name as it is.
    schema, name = (table + "_" + "s" * 63)[:63], "j" * 48
    raw.rows(f'CREATE SCHEMA "{schema}"')
    try:
        async with open_queue(backend, dsn, table=f"{schema}.{name}") as q:
            await q.install()
            raw.conn.execute(q.core.sql.listen)
            await q.enqueue("a")
            await q.enqueue_many([("b", 1), ("b", 2)])
            notes = list(raw.conn.notifies(timeout=10, stop_after=2))
            assert [(n.channel, n.payload) for n in notes] == [
                (q.core.channel, "a"),
                (q.core.channel, "b"),
            ]
            assert len(q.core.channel.encode()) == 63
    finally:
        raw.rows(f'DROP SCHEMA "{schema}" CASCADE')


async def test_stale_claim_cannot_fail_a_reclaimed_job(queue: Any, raw: Raw) -> None:
    await queue.enqueue("a", max_attempts=5)
    [first] = await queue.claim(worker="slow")
    raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour'")
    await queue.reap(timedelta(minutes=5))
    [second] = await queue.claim(worker="fresh")
    with pytest.raises(pgqueue.JobNotRunning):
        await queue.fail(first, "late news")
    current = await queue.get(second.id)
    assert (current.status, current.locked_by, current.attempts) == (JobStatus.RUNNING, "fresh", 2)


# -- the reaper ------------------------------------------------------------------


async def test_reaper_returns_a_row_locked_ten_minutes_ago_and_leaves_a_fresh_one(
    queue: Any, raw: Raw
) -> None:
    stale, fresh = await queue.enqueue_many([("a", 1), ("a", 2)])
    await queue.claim(2, worker="dead-worker")
    raw.rows("UPDATE {table} SET locked_at = now() - interval '10 minutes' WHERE id = %s", stale)

    assert await queue.reap(timedelta(minutes=5)) == [stale]
    rows = dict(raw.rows("SELECT id, (status, locked_by, attempts)::text FROM {table}"))
    assert rows[stale] == "(pending,,1)"
    assert rows[fresh] == "(running,dead-worker,1)"
    assert [j.id for j in await queue.claim(5)] == [stale]
    assert await queue.reap(timedelta(minutes=5)) == []


async def test_reaper_buries_an_expired_job_that_has_used_its_attempts(
    queue: Any, raw: Raw
) -> None:
    job_id = await queue.enqueue("kills-its-worker", max_attempts=1)
    await queue.claim(worker="w")
    raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour'")
    assert await queue.reap(timedelta(minutes=5)) == []
    job = await queue.get(job_id)
    assert job.status is JobStatus.DEAD
    assert "lease expired" in job.last_error


# -- inspection and repair -----------------------------------------------------------


async def test_retry_revives_dead_jobs_with_fresh_attempts(queue: Any) -> None:
    job_id = await queue.enqueue("a", max_attempts=1)
    [job] = await queue.claim()
    assert await queue.fail(job, "no") is JobStatus.DEAD
    assert await queue.retry([job_id]) == 1
    assert await queue.retry([job_id]) == 0  # only dead jobs
    [again] = await queue.claim()
    assert (again.id, again.attempts, again.last_error) == (job_id, 1, "no")


async def test_get_returns_none_for_an_unknown_job(queue: Any) -> None:
    assert await queue.get(123456) is None


async def test_stats_counts_by_status_and_kind(queue: Any) -> None:
    await queue.enqueue_many([("a", 1), ("a", 2), ("b", 3)])
    await queue.enqueue("c", max_attempts=1, delay=timedelta(hours=1))
    [job] = await queue.claim(1, kinds=["b"])
    await queue.fail(job, "x", retry_in=timedelta(0))
    await queue.claim(1, kinds=["a"])
    stats = await queue.stats()
    assert stats.by_status == {
        JobStatus.PENDING: 3,
        JobStatus.RUNNING: 1,
        JobStatus.DEAD: 0,
        JobStatus.WAITING: 0,
    }
    assert stats.by_kind["a"][JobStatus.RUNNING] == 1
    assert stats.by_kind["c"][JobStatus.PENDING] == 1
    assert stats.total == 4
    assert stats.oldest_pending_age is not None and stats.oldest_pending_age >= timedelta(0)


async def test_install_is_idempotent_and_safe_to_run_concurrently(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async def install() -> None:
        async with open_queue(backend, dsn, table=table) as q:
            await q.install()

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(install)
    await install()
    indexes = {
        r[0] for r in raw.rows("SELECT indexname FROM pg_indexes WHERE tablename = %s", table)
    }
    assert {f"{table}_unlimited", f"{table}_limited"} <= indexes
    # The claim index of migration 8 covers the ready index's claims (migration
    # 7) and migration 7's claim index (migration 8).
    assert not {f"{table}_ready", f"{table}_claim"} & indexes


async def test_schema_qualified_table(dsn: str, table: str, backend: str, raw: Raw) -> None:
    raw.rows(f"CREATE SCHEMA IF NOT EXISTS {table}_s")
    try:
        async with open_queue(backend, dsn, table=f"{table}_s.jobs") as q:
            await q.install()
            job_id = await q.enqueue("a")
            assert [j.id for j in await q.claim()] == [job_id]
    finally:
        raw.rows(f"DROP SCHEMA {table}_s CASCADE")


async def test_stale_claim_cannot_fail_a_job_retried_and_reclaimed_by_another_worker(
    queue: Any, raw: Raw
) -> None:
    job_id = await queue.enqueue("a", max_attempts=1)
    [stale] = await queue.claim(worker="A")
    raw.rows("UPDATE {table} SET locked_at = now() - interval '1 hour'")
    await queue.reap(timedelta(minutes=5))  # dead: its only attempt expired
    await queue.retry([job_id])
    [fresh] = await queue.claim(worker="B")
    assert fresh.attempts == stale.attempts == 1  # the same count, another claim
    with pytest.raises(pgqueue.JobNotRunning):
        await queue.fail(stale, "late news from A")
    current = await queue.get(job_id)
    assert (current.status, current.locked_by) == (JobStatus.RUNNING, "B")


@pytest.mark.parametrize("size", [3, 500], ids=["insert", "copy"])
async def test_enqueue_many_joins_the_implicit_transaction_of_a_non_autocommit_connection(
    queue: Any, raw: Raw, dsn: str, backend: str, size: int
) -> None:
    specs = [("pack", i) for i in range(size)]
    if backend == "asyncio":
        aconn = await psycopg.AsyncConnection.connect(dsn)
        try:
            await queue.enqueue_many(specs, conn=aconn)
            await aconn.rollback()
        finally:
            await aconn.close()
    else:

        def open_conn() -> psycopg.Connection[Any]:
            return psycopg.connect(dsn)

        conn = await anyio.to_thread.run_sync(open_conn)
        try:
            await queue.enqueue_many(specs, conn=conn)
            await anyio.to_thread.run_sync(conn.rollback)
        finally:
            await anyio.to_thread.run_sync(conn.close)
    assert raw.count() == 0


HOSTILE = [
    "tab\there",
    "new\nline",
    "back\\slash",
    "cr\rx",
    "quote'\"",
    "'; DROP TABLE x; --",
    "ünï©ødé 🎉",
    "\\N",
]


@pytest.mark.parametrize("size", [8, 400], ids=["insert", "copy"])
async def test_enqueue_many_keeps_hostile_kinds_and_payloads_faithfully(
    queue: Any, raw: Raw, size: int
) -> None:
    specs = [
        (
            HOSTILE[i % len(HOSTILE)],
            {"text": HOSTILE[-1 - i % len(HOSTILE)], "n": i, "deep": [[{}]]},
        )
        for i in range(size)
    ]
    ids = await queue.enqueue_many(specs)
    stored = raw.rows("SELECT id, kind, payload FROM {table} ORDER BY id")
    assert stored == [(i, k, p) for i, (k, p) in zip(ids, specs, strict=True)]
