"""`concurrency=N` runs N handlers at once, on sync, asyncio and trio (SPEC §6).

Plain handlers (they run in worker threads on every backend) meet at a
`threading.Barrier`: its parties pass only if that many handlers run at
the same time, so a worker that runs fewer breaks it after the test's
patience, and the job fails. Counts and orders, never timings.
"""

from __future__ import annotations

import anyio
import anyio.to_thread
import psycopg_pool
import pytest

import pgqueue

from ..backends import QUEUE_OPTIONS
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# Generous: a deadline for "it happened at all", never a performance claim.
PATIENCE = 20


async def test_a_sync_queue_made_inside_an_event_loop_is_served_by_a_sync_worker(
    dsn: str, table: str, raw: Raw
) -> None:
    # Made here, inside the running asyncio or trio program; the worker
    # runs on an event loop of its own, in a thread: nothing of this loop
    # may reach that one.
    handled: list[int] = []
    pool = psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=4, open=False)
    await anyio.to_thread.run_sync(pool.open)
    try:
        queue = pgqueue.Queue(pool, table=table, **QUEUE_OPTIONS)
        await anyio.to_thread.run_sync(queue.install)
        ids = await anyio.to_thread.run_sync(queue.enqueue_many, [("add", i) for i in range(3)])
        worker = pgqueue.Worker(queue, {"add": lambda job: handled.append(job.id)},
                                handle_signals=False)  # fmt: skip
        with anyio.fail_after(PATIENCE):
            await anyio.to_thread.run_sync(lambda: worker.run(until_empty=True))
        assert sorted(handled) == ids
        assert raw.count() == 0
    finally:
        await anyio.to_thread.run_sync(pool.close)
