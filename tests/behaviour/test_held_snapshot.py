"""A worker's claim under a held snapshot (`pgqueue.core.heads`), on sync, asyncio and trio.

A turn given heads starts each (queue, priority) level after its head and
never reads the entries before it; it keeps priority order across levels
with and without heads; a job due earlier than a head is claimed by the
next claim without heads (a rescan); and a worker whose claims walk dead
entries (a snapshot held, every claimed job left in the index) drains every
job, those due before its heads included, each once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pgqueue import JobSpec
from pgqueue.core.heads import NO_HEADS, WALK_FACTOR, WALK_SLACK, ClaimHeads
from pgqueue.core.ops import WorkerClaim

from ..backends import WorkerUnderTest

pytestmark = pytest.mark.anyio


def heads_of(*jobs: Any) -> ClaimHeads:
    """Heads at these jobs, one per level."""
    return ClaimHeads(tuple(((j.queue, j.priority), (j.run_at, j.id)) for j in jobs))


async def turn(queue: Any, limit: int, heads: ClaimHeads = NO_HEADS) -> list[Any]:
    return list((await queue._turn([], [], WorkerClaim.of("w"), limit, heads=heads)).claimed)


async def test_a_claim_with_heads_starts_after_them_and_a_rescan_finds_jobs_behind_them(
    queue: Any,
) -> None:
    first = await queue.enqueue_many([JobSpec("k", {"n": n}) for n in range(4)])
    taken = await turn(queue, 2)
    assert [j.id for j in taken] == first[:2]
    # Due an hour ago: before the head of its level, in (run_at, id) order.
    late = await queue.enqueue("k", run_at=datetime.now(UTC) - timedelta(hours=1))
    heads = heads_of(taken[-1])
    assert [j.id for j in await turn(queue, 10, heads)] == first[2:]
    assert await turn(queue, 10, heads) == []
    assert [j.id for j in await turn(queue, 10)] == [late]


async def test_a_claim_with_heads_keeps_priority_order_across_levels(queue: Any) -> None:
    low = await queue.enqueue_many([JobSpec("k", priority=-5) for _ in range(3)])
    mid = await queue.enqueue_many([JobSpec("k", priority=0) for _ in range(3)])
    high = await queue.enqueue_many([JobSpec("k", priority=5) for _ in range(2)])
    other = await queue.enqueue_many([JobSpec("k", queue="other", priority=1) for _ in range(2)])
    # Heads in the middle of two levels; levels above, between and below
    # them, and in another queue, have none.
    heads = heads_of(await queue.get(low[0]), await queue.get(mid[1]))
    claimed = await turn(queue, 20, heads)
    assert [j.id for j in claimed] == high + other + [mid[2]] + low[1:]
    assert [j.priority for j in claimed] == [5, 5, 1, 1, 0, -5, -5]
    assert sorted(j.id for j in await turn(queue, 20)) == [low[0], mid[0], mid[1]]


async def test_a_level_with_a_head_and_no_job_left_is_passed_over(queue: Any) -> None:
    gone = await queue.enqueue("k", priority=3)
    (job,) = await turn(queue, 1)
    await queue.complete(job)
    rest = await queue.enqueue_many([JobSpec("k", priority=p) for p in (9, 3, -1)])
    assert job.id == gone
    assert [j.id for j in await turn(queue, 10, heads_of(job))] == rest


async def test_a_worker_under_a_held_snapshot_drains_every_job_once(
    queue: Any, backend: str, dsn: str
) -> None:
    batch = 5
    handled: list[int] = []
    with psycopg.connect(dsn) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")  # the snapshot is taken: nothing claimed from here is removed
        # Enough jobs that claims walk more dead entries than heads tolerate.
        walk = WALK_FACTOR * batch + WALK_SLACK
        ids = await queue.enqueue_many([JobSpec("k", {"n": n}) for n in range(2 * walk)])
        worker = WorkerUnderTest(
            backend, queue, {"k": lambda job: handled.append(job.id)}, batch_size=batch
        )
        await worker.run(until_empty=True)
        # Due before every head the worker has: only a rescan finds them.
        past = datetime.now(UTC) - timedelta(hours=1)
        behind = await queue.enqueue_many([JobSpec("k", run_at=past) for _ in range(2 * batch)])
        more = await queue.enqueue_many([JobSpec("k") for _ in range(batch)])
        await worker.run(until_empty=True)
    assert sorted(handled) == sorted(ids + behind + more)
    assert len(handled) == len(set(handled))
