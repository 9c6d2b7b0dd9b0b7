"""Workflows (SPEC §6, "Dependencies", "Chains and groups") on sync, asyncio
and trio: jobs that wait for others, released by the statement that records
the last one's success, cancelled with a dependency that died or was
cancelled; chains and groups in one transaction; and the races that must
release a job exactly once.

Most tests play the worker's part with the queue's own calls (`claim`,
`complete`, `fail`); a few run a real worker.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

import pgqueue
from pgqueue import JobSpec, JobStatus
from pgqueue.core.states import Event

from ..backends import WorkerUnderTest
from ..conftest import Raw

pytestmark = pytest.mark.anyio

KEEP = timedelta(hours=1)
PATIENCE = 20


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


async def run(queue: Any, kind: str, *, worker: str = "w") -> pgqueue.Job:
    """Claim the one ready job, which must be of `kind`."""
    [job] = await queue.claim(10, worker=worker)
    assert isinstance(job, pgqueue.Job) and job.kind == kind
    return job


def dependency_rows(raw: Raw, table: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(f"{table}_dependencies"))
    return int(raw.conn.execute(query).fetchall()[0][0])


async def status(queue: Any, job_id: int) -> JobStatus | None:
    job = await queue.get(job_id)
    return None if job is None else job.status


# -- depends_on --------------------------------------------------------------------


async def test_a_job_waits_until_its_dependency_succeeds(queue: Any, raw: Raw) -> None:
    first = await queue.enqueue("first")
    then = await queue.enqueue("then", {"n": 1}, depends_on=[first])
    assert await status(queue, then) is JobStatus.WAITING
    assert (await queue.get(then)).parents == {first: None}
    # Only the dependency is claimable.
    job = await run(queue, "first")
    assert await queue.claim(10, worker="w") == []
    assert await queue.complete(job) == 1
    # Released by the statement that recorded the success.
    assert await status(queue, then) is JobStatus.PENDING
    assert raw.one("SELECT waiting_on FROM {table} WHERE id = %s", then) == 0
    assert (await run(queue, "then")).payload == {"n": 1}


async def test_a_job_is_released_when_the_last_of_its_dependencies_succeeds(queue: Any) -> None:
    a, b, c = await queue.enqueue_many([("a", None), ("b", None), ("c", None)])
    then = await queue.enqueue("then", depends_on=[a, b, c, b])
    jobs = {j.id: j for j in await queue.claim(3, worker="w")}
    await queue.complete(jobs[a])
    await queue.complete(jobs[c])
    assert await status(queue, then) is JobStatus.WAITING
    await queue.complete(jobs[b])
    assert await status(queue, then) is JobStatus.PENDING


async def test_retries_of_a_dependency_do_not_release(queue: Any) -> None:
    parent = await queue.enqueue("parent", max_attempts=3)
    then = await queue.enqueue("then", depends_on=[parent])
    job = await run(queue, "parent")
    assert await queue.fail(job, "boom", retry_in=timedelta(0)) is JobStatus.PENDING
    assert await status(queue, then) is JobStatus.WAITING
    job = await run(queue, "parent")
    await queue.complete(job)
    assert await status(queue, then) is JobStatus.PENDING


async def test_a_dependency_that_dies_cancels_every_job_below_it(
    queue: Any, raw: Raw, table: str
) -> None:
    parent = await queue.enqueue("parent", max_attempts=1)
    child = await queue.enqueue("child", depends_on=[parent], result_ttl=KEEP)
    grandchild = await queue.enqueue("grandchild", depends_on=[child], result_ttl=KEEP)
    job = await run(queue, "parent")
    bystander = await queue.enqueue("bystander")
    assert await queue.fail(job, "boom") is JobStatus.DEAD
    assert await status(queue, bystander) is JobStatus.PENDING
    assert await status(queue, child) is None
    assert await status(queue, grandchild) is None
    for gone in (child, grandchild):
        result = await queue.result(gone)
        assert result.outcome == "cancelled"
        assert f"job {parent}" in result.error and "dead" in result.error
        with pytest.raises(pgqueue.JobFailed):
            await queue.wait(gone, timeout=1)
    assert dependency_rows(raw, table) == 0


async def test_cancelling_a_dependency_cancels_the_jobs_that_wait_for_it(
    queue: Any, raw: Raw
) -> None:
    parent = await queue.enqueue("parent", delay=timedelta(hours=1))
    child = await queue.enqueue("child", depends_on=[parent], result_ttl=KEEP)
    await queue.enqueue("grandchild", depends_on=[child])
    other = await queue.enqueue("other")
    done = await queue.cancel(parent)
    assert done.deleted == [parent] and done.dependents == 2
    assert [r[0] for r in raw.rows("SELECT id FROM {table}")] == [other]
    result = await queue.result(child)
    assert result.outcome == "cancelled" and f"job {parent}" in result.error


async def test_cancelling_a_waiting_job_cancels_only_what_is_below_it(queue: Any) -> None:
    parent = await queue.enqueue("parent")
    child = await queue.enqueue("child", depends_on=[parent])
    grandchild = await queue.enqueue("grandchild", depends_on=[child])
    done = await queue.cancel(child)
    assert (done.deleted, done.dependents) == ([child], 1)
    assert await status(queue, grandchild) is None
    assert await status(queue, parent) is JobStatus.PENDING
    # The parent's success finds no one left to release.
    await queue.complete(await run(queue, "parent"))
    assert await queue.claim(10, worker="w") == []


async def test_cancelling_a_running_dependency_cancels_the_graph_once_its_worker_stops(
    queue: Any,
) -> None:
    parent = await queue.enqueue("parent", max_attempts=5)
    child = await queue.enqueue("child", depends_on=[parent])
    job = await run(queue, "parent")
    done = await queue.cancel(parent)
    assert done.requested == [parent] and done.dependents == 0
    assert await status(queue, child) is JobStatus.WAITING
    assert await queue.fail(job, "stopped") is JobStatus.CANCELLED
    assert await status(queue, child) is None


async def test_a_dependency_that_already_succeeded_counts_as_satisfied(queue: Any) -> None:
    done = await queue.enqueue("done", result_ttl=KEEP)
    plain = await queue.enqueue("plain")
    for job in await queue.claim(10, worker="w"):
        await queue.complete(job)
    # Gone from the table: its id was given out, and nothing says it failed.
    now = await queue.enqueue("now", depends_on=[done, plain])
    assert await status(queue, now) is JobStatus.PENDING
    assert (await queue.get(now)).parents == {done: None, plain: None}
    waiting = await queue.enqueue("waiting")
    then = await queue.enqueue("then", depends_on=[done, waiting])
    assert await status(queue, then) is JobStatus.WAITING


async def test_unknown_dead_and_bad_dependencies_are_refused_before_anything_is_written(
    queue: Any, raw: Raw
) -> None:
    first = await queue.enqueue("first")
    with pytest.raises(ValueError, match="never"):
        await queue.enqueue("k", depends_on=[first, first + 10_000])
    with pytest.raises(ValueError, match="never"):
        await queue.enqueue_many([("ok", None), JobSpec("k", depends_on=[first + 10_000])])
    bads: list[Any] = ["1", 1, [1.5], [True], [None], {first}, [0]]
    for bad in bads:
        with pytest.raises((TypeError, ValueError)):
            await queue.enqueue("k", depends_on=bad)
        with pytest.raises((TypeError, ValueError)):
            await queue.enqueue_many([("ok", None), JobSpec("k", depends_on=bad)])
    with pytest.raises(ValueError):
        await queue.enqueue("k", depends_on=[first], unique_key="u")
    dead = await queue.enqueue("doomed", max_attempts=1)
    [job] = await queue.claim(1, kinds=["doomed"], worker="w")
    await queue.fail(job, "boom")
    with pytest.raises(ValueError, match="dead"):
        await queue.enqueue("k", depends_on=[dead])
    assert sorted(r[0] for r in raw.rows("SELECT id FROM {table}")) == [first, dead]
    assert raw.one("SELECT dependents FROM {table} WHERE id = %s", first) is None


async def test_a_job_known_to_be_cancelled_is_refused_as_a_dependency(queue: Any) -> None:
    gone = await queue.enqueue("gone", result_ttl=KEEP)
    await queue.cancel(gone)
    with pytest.raises(ValueError, match="cancelled"):
        await queue.enqueue("k", depends_on=[gone])


async def test_enqueue_many_writes_jobs_with_dependencies_among_the_rest(queue: Any) -> None:
    first = await queue.enqueue("first")
    specs = [JobSpec("plain", i) for i in range(250)]  # COPY
    specs[100] = JobSpec("then", 100, depends_on=[first])
    ids = await queue.enqueue_many(specs)
    assert len(set(ids)) == 250
    assert await status(queue, ids[100]) is JobStatus.WAITING
    assert [await status(queue, i) for i in ids[:2]] == [JobStatus.PENDING] * 2


async def test_a_rolled_back_enqueue_of_a_dependent_leaves_nothing(
    queue: Any, business: Any, raw: Raw
) -> None:
    first = await queue.enqueue("first")
    with pytest.raises(Rollback):
        async with business.transaction() as conn:
            await queue.enqueue("then", depends_on=[first], conn=conn)
            raise Rollback
    assert raw.count() == 1
    assert raw.one("SELECT dependents FROM {table} WHERE id = %s", first) is None
    await queue.complete(await run(queue, "first"))


# -- chains and groups -------------------------------------------------------------


async def test_a_chain_runs_its_jobs_one_after_the_other(queue: Any) -> None:
    ids = await queue.chain(JobSpec("one", 1), ("two", 2), JobSpec("three", 3))
    assert [await status(queue, i) for i in ids] == [
        JobStatus.PENDING,
        JobStatus.WAITING,
        JobStatus.WAITING,
    ]
    for kind in ("one", "two", "three"):
        await queue.complete(await run(queue, kind))
    assert await queue.claim(10, worker="w") == []


async def test_a_group_runs_then_once_after_all_its_jobs(queue: Any) -> None:
    group = await queue.group(
        *[JobSpec("part", i, result_ttl=KEEP) for i in range(5)], then=JobSpec("sum")
    )
    assert isinstance(group, pgqueue.Group) and len(group.ids) == 5
    assert group.then is not None
    assert await status(queue, group.then) is JobStatus.WAITING
    jobs = await queue.claim(10, worker="w")
    assert sorted(j.id for j in jobs) == group.ids
    for job in jobs:
        await queue.complete(job)
    job = await run(queue, "sum")
    assert set(job.parents or {}) == set(group.ids)
    alone = await queue.group(JobSpec("alone"))
    assert alone.then is None and len(alone.ids) == 1


async def test_a_chain_or_group_in_a_rolled_back_transaction_leaves_nothing(
    queue: Any, business: Any, raw: Raw
) -> None:
    with pytest.raises(Rollback):
        async with business.transaction() as conn:
            await queue.chain(("a", None), ("b", None), conn=conn)
            await queue.group(("c", None), ("d", None), then=("e", None), conn=conn)
            raise Rollback
    assert raw.count() == 0
    async with business.transaction() as conn:
        ids = await queue.chain(("a", None), ("b", None), conn=conn)
    assert raw.count() == 2 and await status(queue, ids[1]) is JobStatus.WAITING


async def test_bad_chains_and_groups_write_nothing(queue: Any, raw: Raw) -> None:
    with pytest.raises(ValueError):
        await queue.chain()
    with pytest.raises(ValueError):
        await queue.group(then=JobSpec("then"))
    with pytest.raises(TypeError):
        await queue.chain(("a", None), "b")
    with pytest.raises(ValueError):
        await queue.group(("a", None), then=JobSpec("t", depends_on=[10**12]))
    assert raw.count() == 0


async def test_a_worker_runs_a_group_and_then_reads_the_parents_results(
    queue: Any, backend: str
) -> None:
    seen: list[Any] = []

    def part(job: pgqueue.Job) -> int:
        return int(job.payload) * 10

    def total(job: pgqueue.Job) -> None:
        seen.append(pgqueue.job_context().parents)

    group = await queue.group(
        *[JobSpec("part", i, result_ttl=KEEP) for i in range(1, 4)], then=JobSpec("total")
    )
    with anyio.fail_after(PATIENCE):
        while not seen:
            worker = WorkerUnderTest(backend, queue, {"part": part, "total": total})
            await worker.run(until_empty=True)
    assert seen == [dict(zip(group.ids, [10, 20, 30], strict=True))]


# -- exactly once under races ------------------------------------------------------


def _complete_on(dsn: str, statement: bytes, job_id: int) -> psycopg.Connection[Any]:
    """A connection whose open transaction recorded `job_id`'s success."""
    conn = psycopg.connect(dsn)
    conn.execute(statement, {"done": [job_id], "r_id": [], "r_value": []})
    return conn


async def test_the_last_two_dependencies_succeeding_at_once_release_then_exactly_once(
    queue: Any, dsn: str, raw: Raw
) -> None:
    for _ in range(5):
        group = await queue.group(("a", None), ("b", None), then=("then", None))
        await queue.claim(2, worker="w")
        statement = queue.core.sql.outcomes.complete
        first = _complete_on(dsn, statement, group.ids[0])
        # The second waits for the first's lock on `then`, then reads its count.
        second = psycopg.connect(dsn)
        blocked = threading.Thread(
            target=second.execute,
            args=(statement, {"done": [group.ids[1]], "r_id": [], "r_value": []}),
        )
        blocked.start()
        await anyio.sleep(0.2)
        first.commit()
        blocked.join(PATIENCE)
        second.commit()
        first.close()
        second.close()
        then = await queue.get(group.then)
        assert then.status is JobStatus.PENDING
        assert raw.one("SELECT waiting_on FROM {table} WHERE id = %s", group.then) == 0
        await queue.complete(await run(queue, "then"))


async def test_a_dependent_attached_while_its_dependency_succeeds_is_released(
    queue: Any, business: Any
) -> None:
    # The enqueue locks the dependency first; the success waits for it, and
    # must not miss the new job it cannot see.
    parent = await queue.enqueue("parent")
    job = await run(queue, "parent")
    done: list[int] = []
    async with anyio.create_task_group() as tg, business.transaction() as conn:
        then = await queue.enqueue("then", depends_on=[parent], conn=conn)

        async def complete() -> None:
            done.append(await queue.complete(job))

        tg.start_soon(complete)
        await anyio.sleep(0.3)
    assert done == [1]
    assert await status(queue, then) is JobStatus.PENDING


async def test_a_dependent_attached_after_its_dependency_succeeded_is_ready(
    queue: Any, business: Any
) -> None:
    parent = await queue.enqueue("parent")
    job = await run(queue, "parent")
    await queue.complete(job)
    then = await queue.enqueue("then", depends_on=[parent])
    assert await status(queue, then) is JobStatus.PENDING


async def test_a_success_that_waited_for_an_enqueue_attaching_a_dependent_is_not_recorded(
    queue: Any, dsn: str
) -> None:
    # Statement by statement: the success's snapshot cannot see the new
    # dependent, so it leaves the job running; the next statement records it.
    parent = await queue.enqueue("parent")
    await run(queue, "parent")
    enqueuer = psycopg.connect(dsn)
    await anyio.to_thread.run_sync(
        lambda: enqueuer.execute(
            queue.core.sql.dependencies.enqueue,
            {
                "kind": "then", "payload": "null", "run_at": None, "delay": timedelta(0),
                "max_attempts": 3, "queue": "default", "priority": 0, "result_ttl": None,
                "limit_key": None, "trace_context": None, "channel": queue.core.channel,
                "depends_on": [parent],
            },
        )
    )  # fmt: skip
    completer = psycopg.connect(dsn, autocommit=True)
    statement = queue.core.sql.outcomes.complete
    params = {"done": [parent], "r_id": [], "r_value": []}
    found: list[Any] = []
    blocked = threading.Thread(
        target=lambda: found.append(completer.execute(statement, params).fetchone())
    )
    blocked.start()
    await anyio.sleep(0.3)
    enqueuer.commit()
    blocked.join(PATIENCE)
    assert found[0][0] == []  # fenced: the job is still running
    assert await status(queue, parent) is JobStatus.RUNNING
    row = completer.execute(statement, params).fetchone()
    assert row is not None and row[0] == [parent]
    [then] = [j for j in await queue.jobs() if j.kind == "then"]
    assert await status(queue, then.id) is JobStatus.PENDING
    enqueuer.close()
    completer.close()


@pytest.mark.parametrize("direct", [True, False])
async def test_one_dependency_succeeding_and_another_dying_in_one_turn_cancel_the_job(
    queue: Any, direct: bool
) -> None:
    # A worker's turn records both outcomes in one statement: the success
    # must not release (or count down) what the death cancels, directly
    # below the dead job or further down.
    good = await queue.enqueue("good")
    bad = await queue.enqueue("bad", max_attempts=1)
    middle = await queue.enqueue("middle", depends_on=[bad])
    then = await queue.enqueue("then", depends_on=[good, bad if direct else middle])
    jobs = {j.kind: j for j in await queue.claim(10, worker="w")}
    failure = queue.core.failure(jobs["bad"], "boom", event=Event.FAIL)
    done, written = await queue._settle([good], [failure], worker="w")
    assert (done, written) == ([good], {bad: JobStatus.DEAD})
    assert await status(queue, middle) is None
    assert await status(queue, then) is None
    assert await queue.claim(10, worker="w") == []
