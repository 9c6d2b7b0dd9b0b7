"""Job control at the queue's level (SPEC §5): cancel, results and wait,
limits, and their bad input, on sync, asyncio and trio.

No worker here: the tests play the worker's part with the queue's own
worker-facing calls (`claim`, `heartbeat`, `settle`, `turn`, `fail`,
`reap`), so that each promise is checked statement by statement. The
worker's side (a cancel reaching a running handler, return values kept) is
tests/behaviour/test_cancel_worker.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import pytest
from psycopg import sql

import pgqueue
from pgqueue import JobSpec, JobStatus
from pgqueue.core.ops import Heartbeat, WorkerClaim

from ..backends import open_queue
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# Generous: a deadline for "it happened at all", never a performance claim.
PATIENCE = 20
KEEP = timedelta(hours=1)
# A lease every claimed job has outlived by the time the reaper looks.
TINY = timedelta(microseconds=1)


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


def side_rows(raw: Raw, table: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """``query`` with ``{results}``, ``{slots}``, ``{limits}``, ``{history}``
    standing for the queue's side tables."""
    names = {
        part: sql.Identifier(f"{table}_{suffix}")
        for part, suffix in (
            ("results", "results"),
            ("slots", "limit_slots"),
            ("limits", "limits"),
            ("history", "history"),
        )
    }
    cur = raw.conn.execute(sql.SQL(query).format(**names), params or None)
    return cur.fetchall() if cur.description else []


def taken_slots(raw: Raw, table: str, key: str) -> list[tuple[int, int, int]]:
    """(slot, job id, attempt) of the key's slots that are taken."""
    return [
        (s, j, a)
        for s, j, a in side_rows(
            raw,
            table,
            "SELECT slot, job_id, attempt FROM {slots}"
            " WHERE limit_key = %s AND job_id IS NOT NULL ORDER BY slot",
            key,
        )
    ]


async def wait_until(condition: Any, what: str) -> None:
    """Re-check a database condition until it holds."""
    with anyio.fail_after(PATIENCE):
        while not condition():  # noqa: ASYNC110 - the condition lives in the database
            await anyio.sleep(0.02)


async def bury(queue: Any, kind: str = "doomed", **options: Any) -> int:
    """A dead job: its only attempt failed."""
    job_id = await queue.enqueue(kind, max_attempts=1, **options)
    [job] = await queue.claim(1, kinds=[kind], worker="w")
    assert await queue.fail(job, "boom") is JobStatus.DEAD
    return int(job_id)


# -- cancel ----------------------------------------------------------------------


async def test_cancel_deletes_pending_and_dead_jobs_and_asks_running_ones_to_stop(
    queue: Any, raw: Raw
) -> None:
    dead = await bury(queue)
    running = await queue.enqueue("long")
    [claimed] = await queue.claim(1, kinds=["long"], worker="w")
    assert claimed.id == running and not claimed.cancel_requested
    pending = await queue.enqueue("later", delay=timedelta(hours=1))
    other = await queue.enqueue("bystander")
    unknown = other + 1000

    cancelled = await queue.cancel(unknown, pending, running, dead)
    assert cancelled == pgqueue.Cancelled(
        deleted=sorted([pending, dead]), requested=[running], not_found=[unknown]
    )
    assert sorted(r[0] for r in raw.rows("SELECT id FROM {table}")) == [running, other]
    job = await queue.get(running)
    assert (job.status, job.locked_by, job.cancel_requested) == (JobStatus.RUNNING, "w", True)
    # The worker learns it from its heartbeat, which still renews the lease.
    assert await queue._heartbeat([running], worker="w") == Heartbeat([running], [running])
    assert await queue._heartbeat([running], worker="someone else") == Heartbeat([], [])
    # Asking again changes nothing; a bystander is untouched.
    again = await queue.cancel(running, pending)
    assert (again.deleted, again.requested, again.not_found) == ([], [running], [pending])
    assert (await queue.get(other)).status is JobStatus.PENDING


async def test_heartbeat_reports_no_cancel_for_jobs_not_cancelled(queue: Any) -> None:
    a, b = await queue.enqueue_many([("k", 1), ("k", 2)])
    await queue.claim(2, worker="w")
    await queue.cancel(b)
    assert await queue._heartbeat([a, b], worker="w") == Heartbeat([a, b], [b])
    assert await queue._heartbeat([a], worker="w") == Heartbeat([a], [])


async def test_cancel_of_nothing_and_of_bad_ids(queue: Any) -> None:
    assert await queue.cancel() == pgqueue.Cancelled([], [], [])
    with pytest.raises(TypeError):
        await queue.cancel("7")
    with pytest.raises(TypeError):
        await queue.cancel(True)


async def test_cancel_in_a_rolled_back_transaction_leaves_the_job(
    queue: Any, business: Any, raw: Raw
) -> None:
    running = await queue.enqueue("k")
    await queue.claim(1, worker="w")
    pending = await queue.enqueue("k")
    raw.conn.execute(queue.core.sql.listen_control)
    with pytest.raises(Rollback):
        async with business.transaction() as conn:
            inside = await queue.cancel(pending, running, conn=conn)
            assert (inside.deleted, inside.requested) == ([pending], [running])
            raise Rollback
    assert raw.count() == 2
    assert not (await queue.get(pending)).cancel_requested
    assert not (await queue.get(running)).cancel_requested

    # Committed, it takes effect, and its notification is the first heard:
    # the rolled-back one sent none.
    async with business.transaction() as conn:
        done = await queue.cancel(pending, running, conn=conn)
    note = next(raw.conn.notifies(timeout=PATIENCE, stop_after=1))
    assert (note.channel, note.payload) == (queue.core.sql.control_channel, str(running))
    assert (done.deleted, done.requested) == ([pending], [running])
    assert raw.rows("SELECT id FROM {table}") == [(running,)]


async def test_cancel_notifies_the_running_ids_on_the_control_channel(queue: Any, raw: Raw) -> None:
    a, b, c = await queue.enqueue_many([("k", 1), ("k", 2), ("k", 3)])
    await queue.claim(2, worker="w")  # a and b
    raw.conn.execute(queue.core.sql.listen_control)
    raw.conn.execute(queue.core.sql.listen)
    assert (await queue.cancel(a, b, c)).requested == [a, b]
    # A cancel that finds nothing running sends nothing.
    d = await queue.enqueue("later", delay=timedelta(hours=1))
    assert (await queue.cancel(d)).deleted == [d]
    e = await queue.enqueue("marker")
    await queue.claim(1, worker="w")
    await queue.cancel(e)
    # Heard in commit order: only running jobs are announced, on the
    # control channel alone (idle claimers are not woken by a cancel).
    control, wake = queue.core.sql.control_channel, queue.core.channel
    notes = [(n.channel, n.payload) for n in raw.conn.notifies(timeout=PATIENCE, stop_after=4)]
    assert notes[1:] == [(wake, "later"), (wake, "marker"), (control, str(e))]
    assert notes[0][0] == control
    assert sorted(int(i) for i in notes[0][1].split(",")) == [a, b]


@pytest.mark.parametrize("max_attempts", [1, 5])
async def test_a_failure_of_a_cancelled_running_job_deletes_it(
    queue: Any, raw: Raw, max_attempts: int
) -> None:
    job_id = await queue.enqueue("k", max_attempts=max_attempts)
    [job] = await queue.claim(worker="w")
    await queue.cancel(job_id)
    # Not retried with attempts left, not dead at its last: cancelled.
    assert await queue.fail(job, "stopped") is JobStatus.CANCELLED
    assert raw.count() == 0
    assert await queue.claim() == []
    with pytest.raises(pgqueue.JobNotRunning):
        await queue.fail(job, "twice")


@pytest.mark.parametrize(("max_attempts", "status"), [(5, "pending"), (1, "dead")])
async def test_a_cancel_the_table_did_not_request_is_a_plain_failure(
    queue: Any, raw: Raw, max_attempts: int, status: str
) -> None:
    # A worker that reports a cancel with no request in the table trusted
    # a forged notification (anyone may send one): the job is not deleted.
    job_id = await queue.enqueue("k", max_attempts=max_attempts, result_ttl=KEEP)
    [job] = await queue.claim(worker="w")
    failure = queue.core.failure(job, "JobCancelled", event=pgqueue.core.states.Event.CANCEL)
    assert failure.status is JobStatus.CANCELLED
    assert await queue._settle([], [failure], worker="w") == ([], {job_id: JobStatus(status)})
    assert raw.rows("SELECT status, attempts FROM {table}") == [(status, 1)]
    result = await queue.result(job_id)
    assert result.outcome == status


async def test_a_cancel_the_table_requested_deletes_the_job(queue: Any, raw: Raw) -> None:
    job_id = await queue.enqueue("k", max_attempts=5, result_ttl=KEEP)
    [job] = await queue.claim(worker="w")
    await queue.cancel(job_id)
    failure = queue.core.failure(job, "JobCancelled", event=pgqueue.core.states.Event.CANCEL)
    assert await queue._settle([], [failure], worker="w") == ([], {job_id: JobStatus.CANCELLED})
    assert raw.count() == 0
    result = await queue.result(job_id)
    assert (result.outcome, result.value) == ("cancelled", None)


async def test_the_reaper_deletes_a_cancelled_job_whose_lease_expired(queue: Any, raw: Raw) -> None:
    cancelled, plain = await queue.enqueue_many(
        [JobSpec("k", 1, max_attempts=5), JobSpec("k", 2, max_attempts=5)]
    )
    await queue.claim(2, worker="gone")
    await queue.cancel(cancelled)
    assert await queue._reap_outcomes(TINY) == {
        cancelled: JobStatus.CANCELLED,
        plain: JobStatus.PENDING,
    }
    assert raw.rows("SELECT id, status FROM {table}") == [(plain, "pending")]


async def test_the_reaper_does_not_bury_a_cancelled_job_on_its_last_attempt(
    queue: Any, raw: Raw
) -> None:
    job_id = await queue.enqueue("k", max_attempts=1)
    await queue.claim(worker="gone")
    await queue.cancel(job_id)
    assert await queue.reap(TINY) == []
    assert raw.count() == 0


async def test_history_records_cancelled_jobs_from_every_state(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    async with open_queue(backend, dsn, table=table, history=True) as q:
        await q.install()
        dead = await bury(q)
        pending = await q.enqueue("waiting")
        failed = await q.enqueue("running", max_attempts=5)
        reaped = await q.enqueue("running", max_attempts=5)
        done = await q.enqueue("running")
        jobs = {j.id: j for j in await q.claim(3, kinds=["running"], worker="w")}
        await q.cancel(dead, pending, failed, reaped, done)
        assert await q.fail(jobs[failed], "stopped") is JobStatus.CANCELLED
        # A handler that finished anyway: its success is recorded as such.
        assert await q._settle([done], [], worker="w") == ([done], {})
        await q.reap(TINY)
    assert raw.count() == 0
    rows = side_rows(raw, table, "SELECT id, outcome, last_error FROM {history} ORDER BY id")
    assert rows == [
        (dead, "cancelled", "boom"),
        (pending, "cancelled", None),
        # Why each run ended, as its worker (or the reaper) reported it.
        (failed, "cancelled", "stopped"),
        (reaped, "cancelled", rows[3][2]),
        (done, "succeeded", None),
    ]
    assert rows[3][2].startswith("lease expired")


# -- results ------------------------------------------------------------------


async def test_result_follows_a_job_from_pending_to_succeeded(queue: Any) -> None:
    job_id = await queue.enqueue("total", {"n": 3}, result_ttl=KEEP)
    assert await queue.result(job_id) == pgqueue.JobResult(job_id, "pending")
    [job] = await queue.claim(worker="w")
    assert job.result_ttl == KEEP
    running = await queue.result(job)
    assert (running.outcome, running.finished) == ("running", False)
    done, _ = await queue._settle([job_id], [], worker="w", results={job_id: '{"total": 3}'})
    assert done == [job_id]
    result = await queue.result(job_id)
    assert (result.outcome, result.value, result.error) == ("succeeded", {"total": 3}, None)
    assert result.finished and result.finished_at is not None
    assert await queue.wait(job_id, timeout=PATIENCE) == {"total": 3}


async def test_a_success_recorded_by_a_turn_keeps_its_value(queue: Any) -> None:
    kept, plain = await queue.enqueue_many([JobSpec("k", 1, result_ttl=KEEP), JobSpec("k", 2)])
    await queue.claim(2, worker="w")
    nxt = await queue.enqueue("next")
    turn = await queue._turn(
        [kept, plain], [], WorkerClaim.of("w"), 5, results={kept: '[1, "two", null]', plain: "3"}
    )
    assert sorted(turn.completed) == [kept, plain]
    assert [j.id for j in turn.claimed] == [nxt]
    assert (await queue.result(kept)).value == [1, "two", None]
    assert await queue.result(plain) is None  # no result_ttl: nothing kept


async def test_a_success_without_a_value_keeps_null(queue: Any) -> None:
    job_id = await queue.enqueue("k", result_ttl=KEEP)
    await queue.claim(worker="w")
    assert await queue.complete(job_id) == 1
    result = await queue.result(job_id)
    assert (result.outcome, result.value) == ("succeeded", None)
    assert await queue.wait(job_id, timeout=PATIENCE) is None


async def test_result_of_a_dead_job_and_of_a_cancelled_one(queue: Any, raw: Raw) -> None:
    dead = await bury(queue, result_ttl=KEEP)
    result = await queue.result(dead)
    assert (result.outcome, result.error) == ("dead", "boom")
    with pytest.raises(pgqueue.JobFailed) as failed:
        await queue.wait(dead, timeout=PATIENCE)
    assert failed.value.result.outcome == "dead"
    assert "boom" in str(failed.value)
    # Kept as dead beside its row; the row goes when it is cancelled.
    assert side_rows(raw, queue.table, "SELECT job_id, outcome FROM {results}") == [(dead, "dead")]

    await queue.cancel(dead)
    pending = await queue.enqueue("k", result_ttl=KEEP)
    await queue.cancel(pending)
    for job_id in (dead, pending):
        result = await queue.result(job_id)
        assert (result.outcome, result.value) == ("cancelled", None)
        with pytest.raises(pgqueue.JobFailed, match="cancelled") as failed:
            await queue.wait(job_id, timeout=PATIENCE)
        assert failed.value.result.outcome == "cancelled"


async def test_result_of_a_job_without_result_ttl(queue: Any) -> None:
    dead = await bury(queue)
    job_id = await queue.enqueue("k")
    assert (await queue.result(job_id)).outcome == "pending"
    # A dead job's row says so, result_ttl or not.
    assert ((await queue.result(dead)).outcome, (await queue.result(dead)).error) == (
        "dead",
        "boom",
    )
    await queue.claim(1, kinds=["k"], worker="w")
    await queue._settle([job_id], [], worker="w", results={job_id: '"ignored"'})
    assert await queue.result(job_id) is None
    assert await queue.result(job_id + 1000) is None
    await queue.cancel(dead)
    assert await queue.result(dead) is None


async def test_only_jobs_with_result_ttl_notify_their_results(queue: Any, raw: Raw) -> None:
    raw.conn.execute(queue.core.sql.listen_results)
    plain, kept = await queue.enqueue_many([JobSpec("k", 1), JobSpec("k", 2, result_ttl=KEEP)])
    await queue.claim(1, worker="w")
    await queue._settle([plain], [], worker="w")  # committed first: heard first, if at all
    await queue.claim(1, worker="w")
    await queue._settle([kept], [], worker="w", results={kept: "1"})
    note = next(raw.conn.notifies(timeout=PATIENCE, stop_after=1))
    assert (note.channel, note.payload) == (queue.core.sql.results_channel, str(kept))


async def test_wait_returns_the_value_of_a_job_completed_while_it_waits(
    queue: Any, raw: Raw
) -> None:
    job_id = await queue.enqueue("k", result_ttl=KEEP)
    await queue.claim(worker="w")
    got: list[Any] = []

    async def waiter() -> None:
        got.append(await queue.wait(job_id, timeout=PATIENCE))

    def waiting() -> bool:
        # The wait LISTENs, then looks: once it has looked, it is listening.
        looked = "%" + f"{queue.table}_results" + "%"
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
            " AND state = 'idle' AND query LIKE %s AND query NOT LIKE 'LISTEN%%'"
        )
        return bool(raw.one(query, looked))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await wait_until(waiting, "the wait has looked")
        assert got == []
        await queue._settle([job_id], [], worker="w", results={job_id: '{"ok": true}'})
    assert got == [{"ok": True}]


async def test_waits_on_many_jobs_from_many_tasks(queue: Any) -> None:
    ids = await queue.enqueue_many([JobSpec("k", i, result_ttl=KEEP) for i in range(6)])
    got: dict[int, Any] = {}

    async def waiter(job_id: int) -> None:
        got[job_id] = await queue.wait(job_id, timeout=PATIENCE)

    async with anyio.create_task_group() as tg:
        for job_id in ids:
            tg.start_soon(waiter, job_id)
        jobs = await queue.claim(6, worker="w")
        await queue._settle(ids, [], worker="w", results={j.id: str(j.payload) for j in jobs})
    assert got == {job_id: n for n, job_id in enumerate(ids)}


async def test_wait_raises_job_failed_when_the_job_dies_while_it_waits(queue: Any) -> None:
    job_id = await queue.enqueue("k", max_attempts=1, result_ttl=KEEP)
    [job] = await queue.claim(worker="w")
    caught: list[pgqueue.JobFailed] = []

    async def waiter() -> None:
        with pytest.raises(pgqueue.JobFailed) as failed:
            await queue.wait(job_id, timeout=PATIENCE)
        caught.append(failed.value)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        assert await queue.fail(job, ValueError("no such order")) is JobStatus.DEAD
    [failed] = caught
    assert failed.result.outcome == "dead"
    assert failed.result.error == "ValueError: no such order"


async def test_wait_times_out_on_a_job_that_does_not_finish(queue: Any) -> None:
    job_id = await queue.enqueue("k", result_ttl=KEEP)
    with pytest.raises(TimeoutError, match=f"job {job_id}"):
        await queue.wait(job_id, timeout=0.3)
    await queue.claim(worker="w")
    with pytest.raises(TimeoutError, match="running"):
        await queue.wait(job_id, timeout=0.3)


async def test_wait_on_a_job_never_enqueued_raises_no_result_and_writes_nothing(
    queue: Any, raw: Raw
) -> None:
    other = await queue.enqueue("k")
    with pytest.raises(pgqueue.NoResult) as caught:
        await queue.wait(other + 1000, timeout=PATIENCE)
    assert not isinstance(caught.value, pgqueue.JobNotCommitted)
    assert caught.value.job_id == other + 1000
    assert raw.rows("SELECT id FROM {table}") == [(other,)]


async def test_wait_on_a_job_that_ends_without_result_ttl_raises_no_result(queue: Any) -> None:
    job_id = await queue.enqueue("k")
    await queue.claim(worker="w")
    await queue.complete(job_id)
    with pytest.raises(pgqueue.NoResult):
        await queue.wait(job_id, timeout=PATIENCE)


async def test_wait_on_a_job_of_an_open_transaction_says_so_at_once(
    queue: Any, business: Any, raw: Raw
) -> None:
    with pytest.raises(Rollback):
        async with business.transaction() as conn:
            job_id = await queue.enqueue("k", result_ttl=KEEP, conn=conn)
            with pytest.raises(pgqueue.JobNotCommitted, match="not committed"):
                await queue.wait(job_id, timeout=PATIENCE)
            raise Rollback
    assert raw.count() == 0
    # Rolled back, it is no job at all.
    with pytest.raises(pgqueue.NoResult) as caught:
        await queue.wait(job_id, timeout=PATIENCE)
    assert not isinstance(caught.value, pgqueue.JobNotCommitted)


async def test_bad_wait_arguments(queue: Any) -> None:
    job_id = await queue.enqueue("k", result_ttl=KEEP)
    with pytest.raises(ValueError, match="positive"):
        await queue.wait(job_id, timeout=0)
    with pytest.raises(TypeError, match="seconds"):
        await queue.wait(job_id, timeout="1")
    with pytest.raises(TypeError):
        await queue.wait("1")
    with pytest.raises(TypeError):
        await queue.result(None)


async def test_results_expire_and_the_reaper_prunes_them(queue: Any, raw: Raw) -> None:
    short, long = await queue.enqueue_many(
        [JobSpec("k", 1, result_ttl=TINY), JobSpec("k", 2, result_ttl=KEEP)]
    )
    await queue.claim(2, worker="w")
    await queue._settle([short, long], [], worker="w", results={short: "1", long: "2"})
    assert await queue.result(short) is None  # past its ttl: not read, even before pruning
    assert (await queue.result(long)).value == 2
    kept = "SELECT job_id FROM {results} ORDER BY job_id"
    assert side_rows(raw, queue.table, kept) == [(short,), (long,)]
    await queue.reap(timedelta(minutes=5))
    assert side_rows(raw, queue.table, kept) == [(long,)]
    with pytest.raises(pgqueue.NoResult):
        await queue.wait(short, timeout=PATIENCE)


async def test_a_retried_job_keeps_the_result_of_its_last_run(queue: Any) -> None:
    job_id = await queue.enqueue("k", max_attempts=1, result_ttl=KEEP)
    [job] = await queue.claim(worker="w")
    await queue.fail(job, "first run")
    assert (await queue.result(job_id)).outcome == "dead"
    await queue.retry([job_id])
    assert (await queue.result(job_id)).outcome == "pending"
    await queue.claim(worker="w")
    await queue._settle([job_id], [], worker="w", results={job_id: '"second run"'})
    result = await queue.result(job_id)
    assert (result.outcome, result.value, result.error) == ("succeeded", "second run", None)


# -- limits ------------------------------------------------------------------


async def test_a_key_without_a_limit_runs_one_job_at_a_time(queue: Any, raw: Raw) -> None:
    first, second = await queue.enqueue_many(
        [JobSpec("k", 1, limit_key="acct:1"), JobSpec("k", 2, limit_key="acct:1")]
    )
    [job] = await queue.claim(10, worker="w")
    assert (job.id, job.limit_key) == (first, "acct:1")
    assert await queue.claim(10, worker="w") == []
    assert taken_slots(raw, queue.table, "acct:1") == [(1, first, 1)]
    assert await queue.limits() == [pgqueue.LimitState("acct:1", 1, 1, 1, False)]
    await queue.complete(first)
    assert [j.id for j in await queue.claim(10, worker="w")] == [second]


async def test_set_limit_lets_that_many_run(queue: Any, raw: Raw) -> None:
    await queue.set_limit("api", 3)
    ids = await queue.enqueue_many([JobSpec("k", i, limit_key="api") for i in range(5)])
    first = await queue.claim(10, worker="w")
    assert [j.id for j in first] == ids[:3]
    assert await queue.claim(10, worker="w") == []
    assert await queue.limits() == [pgqueue.LimitState("api", 3, 3, 2, True)]
    assert sorted(j for _, j, _ in taken_slots(raw, queue.table, "api")) == ids[:3]
    await queue.complete(first[0])
    assert [j.id for j in await queue.claim(10, worker="w")] == [ids[3]]


async def test_limits_lists_each_key_and_set_limit_of_a_key_without_jobs(queue: Any) -> None:
    assert await queue.limits() == []
    await queue.set_limit("later", 4)
    await queue.enqueue("k", limit_key="busy")
    await queue.enqueue("k", limit_key="busy")
    await queue.claim(5, worker="w")
    assert await queue.limits() == [
        pgqueue.LimitState("busy", 1, 1, 1, False),
        pgqueue.LimitState("later", 4, 0, 0, True),
    ]


async def test_limited_jobs_keep_priority_order_within_their_key(queue: Any) -> None:
    low = await queue.enqueue("k", limit_key="x", priority=-5)
    high = await queue.enqueue("k", limit_key="x", priority=50)
    [job] = await queue.claim(5, worker="w")
    assert job.id == high
    await queue.complete(job)
    assert [j.id for j in await queue.claim(5, worker="w")] == [low]


async def test_concurrent_claimers_never_exceed_the_limit(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    limit, claimers, total = 3, 8, 30
    async with open_queue(backend, dsn, table=table, max_connections=claimers) as q:
        await q.install()
        await q.set_limit("k", limit)
        ids = await q.enqueue_many([JobSpec("k", i, limit_key="k") for i in range(total)])
        # Unlimited jobs beside them, claimed by the same statements.
        free = await q.enqueue_many([("free", i) for i in range(total)])
        ran: list[int] = []
        ran_free: list[int] = []
        for _ in range(total):  # at least one limited job a round
            # A round: every claimer claims at once, and no one frees a slot
            # until all are done, so what a round claims is what runs at once.
            claimed: list[Any] = []

            async def claimer(n: int, claimed: list[Any] = claimed) -> None:
                claimed.extend(await q.claim(2, worker=f"c{n}"))

            async with anyio.create_task_group() as tg:
                for n in range(claimers):
                    tg.start_soon(claimer, n)
            limited = [j.id for j in claimed if j.limit_key == "k"]
            assert 1 <= len(limited) <= limit, limited
            running = raw.rows(
                "SELECT id FROM {table} WHERE status = 'running' AND limit_key = 'k'"
            )
            assert sorted(r[0] for r in running) == sorted(limited)
            assert sorted((j, a) for _, j, a in taken_slots(raw, table, "k")) == sorted(
                (j.id, j.attempts) for j in claimed if j.limit_key == "k"
            )
            ran.extend(limited)
            ran_free.extend(j.id for j in claimed if j.limit_key is None)
            await q.complete(*claimed)
            if len(ran) == total:
                break
        assert sorted(ran) == ids
        assert taken_slots(raw, table, "k") == []
        # The unlimited jobs went in the first rounds, beside the limited ones.
        assert sorted(ran_free) == free


async def test_a_slot_is_freed_by_success_failure_and_the_reaper(queue: Any, raw: Raw) -> None:
    a, b, c = await queue.enqueue_many(
        [JobSpec("k", i, limit_key="one", max_attempts=5) for i in range(3)]
    )
    # Success.
    [job] = await queue.claim(5, worker="w")
    assert job.id == a
    await queue.complete(job)
    # Failure with attempts left: back to pending, slot free.
    [job] = await queue.claim(5, worker="w")
    assert job.id == b
    assert await queue.fail(job, "again", retry_in=timedelta(hours=1)) is JobStatus.PENDING
    assert taken_slots(raw, queue.table, "one") == []
    # The reaper.
    [job] = await queue.claim(5, worker="gone")
    assert job.id == c
    assert await queue.reap(TINY) == [c]
    assert taken_slots(raw, queue.table, "one") == []
    [job] = await queue.claim(5, worker="w")
    assert (job.id, job.attempts) == (c, 2)
    # A cancel of the running job's: recorded by its failure.
    await queue.cancel(c)
    assert taken_slots(raw, queue.table, "one") == [(1, c, 2)]
    assert await queue.fail(job, "stopped") is JobStatus.CANCELLED
    assert taken_slots(raw, queue.table, "one") == []
    # A dead job holds no slot.
    d = await queue.enqueue("k", limit_key="one", max_attempts=1)
    [job] = await queue.claim(5, worker="w")
    assert job.id == d and await queue.fail(job, "x") is JobStatus.DEAD
    assert await queue.limits() == [pgqueue.LimitState("one", 1, 0, 1, False)]


async def test_a_stale_worker_cannot_free_the_slot_of_a_newer_claim(queue: Any, raw: Raw) -> None:
    job_id = await queue.enqueue("k", limit_key="one", max_attempts=5)
    [stale] = await queue.claim(worker="slow")
    assert await queue.reap(TINY) == [job_id]
    [fresh] = await queue.claim(worker="fresh")
    assert (fresh.id, fresh.attempts) == (job_id, 2)
    waiting = await queue.enqueue("k", limit_key="one")
    assert taken_slots(raw, queue.table, "one") == [(1, job_id, 2)]

    with pytest.raises(pgqueue.JobNotRunning):
        await queue.fail(stale, "late news")
    assert await queue._settle([job_id], [], worker="slow") == ([], {})
    stale_failure = queue.core.failure(stale, "late", event=pgqueue.core.states.Event.FAIL)
    assert await queue._settle([], [stale_failure], worker="slow") == ([], {})
    # The slot is still the fresh claim's: the waiting job stays waiting.
    assert taken_slots(raw, queue.table, "one") == [(1, job_id, 2)]
    assert await queue.claim(5, worker="other") == []
    assert await queue.limits() == [pgqueue.LimitState("one", 1, 1, 1, False)]

    assert await queue._settle([job_id], [], worker="fresh") == ([job_id], {})
    assert [j.id for j in await queue.claim(5, worker="other")] == [waiting]


async def test_a_success_hands_its_slot_to_the_next_job_of_its_key_in_the_same_turn(
    queue: Any, raw: Raw
) -> None:
    await queue.set_limit("one", 1)
    first, second, third = await queue.enqueue_many(
        [JobSpec("k", {"n": n}, limit_key="one") for n in range(3)]
    )
    [job] = await queue.claim(5, worker="w")
    assert job.id == first
    # The turn that records the success claims the next job of the key, on
    # the slot the success held: no claim in between could take the slot.
    turn = await queue._turn([first], [], WorkerClaim.of("w"), 5)
    assert turn.completed == [first]
    assert [j.id for j in turn.claimed] == [second]
    assert turn.slots_left_free == 0
    assert taken_slots(raw, queue.table, "one") == [(1, second, 1)]
    assert await queue.claim(5, worker="other") == []
    # A failure frees its slot (the job waits out its backoff); the last
    # success finds no job of its key ready and leaves its slot free.
    [job] = (await queue._turn([second], [], WorkerClaim.of("w"), 5)).claimed
    assert job.id == third
    turn = await queue._turn([third], [], WorkerClaim.of("w"), 5)
    assert (turn.claimed, turn.slots_left_free) == ([], 1)
    assert taken_slots(raw, queue.table, "one") == []
    assert await queue.limits() == [pgqueue.LimitState("one", 1, 0, 0, True)]


async def test_a_slot_is_handed_only_to_a_job_the_worker_may_run_within_the_limit(
    queue: Any, raw: Raw
) -> None:
    await queue.set_limit("one", 2)
    a, b = await queue.enqueue_many([JobSpec("a", limit_key="one") for _ in range(2)])
    other_kind = await queue.enqueue("b", limit_key="one")
    [ja, jb] = await queue.claim(5, worker="w", kinds=["a"])
    assert {ja.id, jb.id} == {a, b}
    # Of another kind than the worker serves: not handed; the slot is free.
    turn = await queue._turn([a], [], WorkerClaim.of("w", kinds=["a"]), 5)
    assert (turn.claimed, turn.slots_left_free) == ([], 1)
    # A lowered limit: the slot of a job above it is not handed on either.
    c = await queue.enqueue("a", limit_key="one")
    await queue.set_limit("one", 1)
    assert {s for s, _, _ in taken_slots(raw, queue.table, "one")} == {2}
    turn = await queue._turn([b], [], WorkerClaim.of("w"), 5)
    assert (turn.claimed, turn.slots_left_free) == ([], 1)
    # Within the limit again, a claim takes the slot; the handed-on chain
    # then runs the key's jobs one at a time, in order.
    [job] = await queue.claim(5, worker="w")
    assert job.id == other_kind
    turn = await queue._turn([other_kind], [], WorkerClaim.of("w"), 5)
    assert [j.id for j in turn.claimed] == [c]
    # A key with a rate: its tokens decide, so a success hands nothing on.
    await queue.set_rate("one", per_second=1000, burst=10)
    d = await queue.enqueue("a", limit_key="one")
    turn = await queue._turn([c], [], WorkerClaim.of("w"), 5)
    assert turn.slots_left_free == 1
    assert [j.id for j in turn.claimed] in ([], [d])  # a token, in a claim that saw the slot free


async def test_lowering_a_limit_holds_claims_until_running_jobs_drop_below_it(
    queue: Any, raw: Raw
) -> None:
    await queue.set_limit("k", 3)
    ids = await queue.enqueue_many([JobSpec("k", i, limit_key="k") for i in range(6)])
    running = {j.id: j for j in await queue.claim(10, worker="w")}
    assert sorted(running) == ids[:3]
    await queue.set_limit("k", 1)
    assert await queue.claim(10, worker="w") == []
    # Free the lowest slot first: the two jobs in slots above the new limit
    # still run, and count.
    by_slot = {slot: job for slot, job, _ in taken_slots(raw, queue.table, "k")}
    for slot in (1, 2):
        await queue.complete(by_slot[slot])
        assert await queue.claim(10, worker="w") == [], f"slot {slot} freed"
        limit = (await queue.limits())[0]
        assert (limit.max_running, limit.running) == (1, 3 - slot)
    await queue.complete(by_slot[3])
    [job] = await queue.claim(10, worker="w")
    assert job.id == ids[3]
    assert await queue.claim(10, worker="w") == []
    # Raised again, more run.
    await queue.set_limit("k", 2)
    assert [j.id for j in await queue.claim(10, worker="w")] == [ids[4]]


async def test_concurrent_claimers_after_a_lowered_limit_never_exceed_it(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    claimers = 6
    async with open_queue(backend, dsn, table=table, max_connections=claimers) as q:
        await q.install()
        await q.set_limit("k", 4)
        await q.enqueue_many([JobSpec("k", i, limit_key="k") for i in range(20)])
        await q.claim(10, worker="w")
        await q.set_limit("k", 2)
        by_slot = {slot: job for slot, job, _ in taken_slots(raw, table, "k")}

        async def round_of_claims() -> list[int]:
            claimed: list[int] = []

            async def claimer(n: int) -> None:
                claimed.extend(j.id for j in await q.claim(3, worker=f"c{n}"))

            async with anyio.create_task_group() as tg:
                for n in range(claimers):
                    tg.start_soon(claimer, n)
            return claimed

        # Slots 1 and 2 free, 3 and 4 (above the limit) still taken: full.
        await q.complete(by_slot[1], by_slot[2])
        assert await round_of_claims() == []
        # While any slot above the limit is taken, nothing starts: so no
        # claim, however many at once, can pass the new limit.
        await q.complete(by_slot[3])
        assert await round_of_claims() == []
        await q.complete(by_slot[4])
        assert len(await round_of_claims()) == 2
        assert [s for s, _, _ in taken_slots(raw, table, "k")] == [1, 2]


async def test_a_workers_turn_claims_limited_jobs_once_limits_come_into_use(
    queue: Any,
) -> None:
    plain = await queue.enqueue("k")
    turn = await queue._turn([], [], WorkerClaim.of("w"), 10)
    assert [j.id for j in turn.claimed] == [plain]
    # The table's first limited jobs, and another job beside them.
    limited = await queue.enqueue_many([JobSpec("k", i, limit_key="x") for i in range(2)])
    other = await queue.enqueue("k")
    turn = await queue._turn([plain], [], WorkerClaim.of("w"), 10)
    assert turn.completed == [plain]
    assert sorted(j.id for j in turn.claimed) == sorted([limited[0], other])
    # From then on, the limit holds in every turn.
    turn = await queue._turn([other], [], WorkerClaim.of("w"), 10)
    assert (turn.completed, turn.claimed) == ([other], [])
    turn = await queue._turn([limited[0]], [], WorkerClaim.of("w"), 10)
    # The slot that turn freed is free for the next claim (the statement's
    # own claim may not see it: it reads the slots as they were before it).
    then = await queue._turn([], [], WorkerClaim.of("w"), 10)
    assert [j.id for j in turn.claimed + then.claimed] == [limited[1]]


async def test_a_turn_told_its_successes_are_plain_still_frees_slots_and_keeps_results(
    queue: Any, raw: Raw, table: str
) -> None:
    # `plain` leaves the slot and result bookkeeping out of the statement;
    # a caller that says so wrongly loses neither.
    limited = await queue.enqueue("k", limit_key="x")
    kept = await queue.enqueue("k", result_ttl=KEEP)
    ordinary = await queue.enqueue("k")
    assert len(await queue.claim(3, worker="w")) == 3
    assert [s for s, _, _ in taken_slots(raw, table, "x")] == [1]
    turn = await queue._turn([limited, kept, ordinary], [], WorkerClaim.of("w"), 5, plain=True)
    assert sorted(turn.completed) == sorted([limited, kept, ordinary])
    assert taken_slots(raw, table, "x") == []
    result = await queue.result(kept)
    assert (result.outcome, result.value) == ("succeeded", None)
    assert await queue.result(ordinary) is None
    # A success this worker no longer holds is refused either way.
    again = await queue.enqueue("k")
    await queue.claim(worker="other")
    turn = await queue._turn([again], [], WorkerClaim.of("w"), 5, plain=True)
    assert turn.completed == []


async def test_a_limit_of_zero_holds_its_jobs_back(queue: Any) -> None:
    await queue.set_limit("off", 0)
    held = await queue.enqueue("k", limit_key="off")
    assert await queue.claim(5, worker="w") == []
    assert await queue.limits() == [pgqueue.LimitState("off", 0, 0, 1, True)]
    await queue.set_limit("off", 1)
    assert [j.id for j in await queue.claim(5, worker="w")] == [held]


async def test_jobs_without_a_limit_key_are_claimed_past_a_full_limit(queue: Any) -> None:
    limited = await queue.enqueue_many([JobSpec("k", i, limit_key="slow") for i in range(3)])
    plain = await queue.enqueue_many([("k", i) for i in range(3)])
    first = await queue.claim(10, worker="w")
    assert sorted(j.id for j in first) == sorted([limited[0], *plain])
    assert await queue.claim(10, worker="w") == []
    await queue.set_limit("slow", 0)
    more = await queue.enqueue("k")
    assert [j.id for j in await queue.claim(10, worker="w")] == [more]


async def test_limited_claims_honour_kinds_queues_and_pauses(queue: Any) -> None:
    mail = await queue.enqueue("mail", limit_key="smtp", queue="mail")
    sms = await queue.enqueue("sms", limit_key="gateway")
    await queue.pause_queue("mail")
    assert [j.id for j in await queue.claim(5, worker="w", kinds=["mail", "other"])] == []
    assert [j.id for j in await queue.claim(5, worker="w", queues=["mail"])] == []
    await queue.resume_queue("mail")
    assert [j.id for j in await queue.claim(5, worker="w", queues=["default"])] == [sms]
    assert [j.id for j in await queue.claim(5, worker="w", kinds=["mail"])] == [mail]


async def test_a_delayed_limited_job_waits_for_its_time(queue: Any, raw: Raw) -> None:
    later = await queue.enqueue("k", limit_key="x", delay=timedelta(hours=1))
    assert await queue.claim(5, worker="w") == []
    raw.rows("UPDATE {table} SET run_at = now() WHERE id = %s", later)
    assert [j.id for j in await queue.claim(5, worker="w")] == [later]


@pytest.mark.parametrize("size", [3, 250], ids=["insert", "copy"])
async def test_enqueue_many_keeps_limit_keys_and_result_ttls(
    queue: Any, raw: Raw, size: int
) -> None:
    specs = [
        JobSpec("k", i, limit_key=f"key{i % 2}", result_ttl=timedelta(minutes=i + 1))
        if i % 3
        else JobSpec("k", i)
        for i in range(size)
    ]
    ids = await queue.enqueue_many(specs)
    stored = raw.rows("SELECT id, limit_key, result_ttl FROM {table} ORDER BY id")
    assert stored == [(i, s.limit_key, s.result_ttl) for i, s in zip(ids, specs, strict=True)]
    # Each key has its slot: one job of each key runs, beside the rest.
    claimed = await queue.claim(1000, worker="w")
    keys = sorted(j.limit_key for j in claimed if j.limit_key is not None)
    assert keys == ["key0", "key1"]
    assert len(claimed) == 2 + sum(1 for s in specs if s.limit_key is None)
    states = await queue.limits()
    assert [(s.key, s.max_running, s.running) for s in states] == [("key0", 1, 1), ("key1", 1, 1)]
    kept = [j for j in claimed if j.result_ttl is not None]
    await queue._settle([j.id for j in kept], [], worker="w", results={j.id: "7" for j in kept})
    for job in kept:
        assert (await queue.result(job.id)).value == 7


async def test_enqueue_with_limit_key_in_a_rolled_back_transaction_leaves_nothing(
    queue: Any, business: Any, raw: Raw
) -> None:
    with pytest.raises(Rollback):
        async with business.transaction() as conn:
            await queue.enqueue("k", limit_key="tx", conn=conn)
            await queue.enqueue_many([JobSpec("k", limit_key="tx2")], conn=conn)
            raise Rollback
    assert raw.count() == 0
    assert await queue.limits() == []


# -- bad input ------------------------------------------------------------------

BAD_OPTIONS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("int result_ttl", {"result_ttl": 60}, TypeError, "result_ttl"),
    ("float result_ttl", {"result_ttl": 1.5}, TypeError, "result_ttl"),
    ("zero result_ttl", {"result_ttl": timedelta(0)}, ValueError, "result_ttl"),
    ("negative result_ttl", {"result_ttl": timedelta(seconds=-1)}, ValueError, "result_ttl"),
    ("huge result_ttl", {"result_ttl": timedelta(days=999_999)}, ValueError, "result_ttl"),
    ("empty limit_key", {"limit_key": ""}, ValueError, "limit_key"),
    ("int limit_key", {"limit_key": 7}, TypeError, "limit_key"),
    ("NUL in limit_key", {"limit_key": "a\x00"}, ValueError, "limit_key"),
    ("long limit_key", {"limit_key": "k" * 1000}, ValueError, "limit_key"),
]


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [case[1:] for case in BAD_OPTIONS],
    ids=[case[0] for case in BAD_OPTIONS],
)
async def test_bad_result_ttl_or_limit_key_raises_and_writes_nothing(
    queue: Any, raw: Raw, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        await queue.enqueue("k", **options)
    good = [JobSpec("k", i, limit_key="fine") for i in range(300)]
    for size in (3, 300):  # the array and the COPY paths
        with pytest.raises(error, match=match):
            await queue.enqueue_many([*good[: size - 1], JobSpec("k", **options)])
    assert raw.count() == 0
    assert await queue.limits() == []


BAD_LIMITS: list[tuple[str, tuple[Any, ...], type[Exception], str]] = [
    ("negative", ("k", -1), ValueError, "limit"),
    ("huge", ("k", 10**9), ValueError, "limit"),
    ("bool", ("k", True), TypeError, "int"),
    ("text", ("k", "3"), TypeError, "int"),
    ("float", ("k", 2.0), TypeError, "int"),
    ("None", ("k", None), TypeError, "int"),
    ("empty key", ("", 1), ValueError, "limit_key"),
    ("int key", (5, 1), TypeError, "limit_key"),
]


@pytest.mark.parametrize(
    ("args", "error", "match"), [c[1:] for c in BAD_LIMITS], ids=[c[0] for c in BAD_LIMITS]
)
async def test_bad_set_limit_raises_and_writes_nothing(
    queue: Any, raw: Raw, args: tuple[Any, ...], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        await queue.set_limit(*args)
    assert await queue.limits() == []
    assert side_rows(raw, queue.table, "SELECT count(*) FROM {slots}") == [(0,)]
