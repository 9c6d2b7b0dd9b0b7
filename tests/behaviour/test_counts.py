"""Counts that never scan (`pgqueue.core.queue.counts`) on sync, asyncio and trio.

A small table is counted exactly; a large one through the partial indexes,
up to a cap, each count past the cap estimated and marked so. The sizes are
made small here (`EXACT_ROWS`, `CAP`) so that a few jobs make a "large"
table; ``benchmarks/stats.py`` times the real thing on 10M rows.
"""

from __future__ import annotations

from typing import Any

import pytest

from pgqueue import JobStatus
from pgqueue.core.queue import counts

from ..conftest import Raw

pytestmark = pytest.mark.anyio

PENDING, RUNNING, DEAD = JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DEAD
WAITING = JobStatus.WAITING


async def fill(queue: Any, raw: Raw) -> None:
    """12 pending jobs (9 in ``default``, 3 in ``b``), 2 running, 1 dead."""
    dead = await queue.enqueue("d", max_attempts=1)
    [job] = await queue.claim(1, kinds=["d"], worker="w")
    assert job.id == dead and await queue.fail(job, "broke") is JobStatus.DEAD
    await queue.enqueue_many([("k", i) for i in range(9)])
    await queue.claim(2, worker="w")
    raw.rows("UPDATE {table} SET queue = 'b' WHERE id IN"
             " (SELECT id FROM {table} WHERE status = 'pending' ORDER BY id LIMIT 3)")  # fmt: skip
    await queue.enqueue_many([("j", i) for i in range(5)])


async def test_a_small_table_is_counted_exactly(queue: Any, raw: Raw) -> None:
    await fill(queue, raw)
    stats = await queue.stats()
    assert stats.exact and stats.estimated == frozenset()
    assert stats.by_status == {PENDING: 12, RUNNING: 2, DEAD: 1, WAITING: 0}
    assert stats.by_queue["b"][PENDING] == 3 and stats.by_kind["j"][PENDING] == 5
    assert all(not q.estimated for q in await queue.queues())


async def test_under_the_cap_a_large_table_s_counts_are_exact(
    queue: Any, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(counts, "EXACT_ROWS", 5)
    monkeypatch.setattr(counts, "CAP", 100)
    await fill(queue, raw)
    stats = await queue.stats()
    assert stats.exact
    assert stats.by_status == {PENDING: 12, RUNNING: 2, DEAD: 1, WAITING: 0}
    assert {q: c[PENDING] for q, c in stats.by_queue.items()} == {"b": 3, "default": 9}
    assert stats.by_priority[0] == {PENDING: 12, RUNNING: 2, DEAD: 1, WAITING: 0}
    # Pending jobs without a limit key are counted by queue and priority, not kind.
    assert stats.by_kind["k"][RUNNING] == 2 and stats.by_kind["d"][DEAD] == 1
    states = {q.name: q for q in await queue.queues()}
    assert states["default"].counts == {PENDING: 9, RUNNING: 2, DEAD: 1, WAITING: 0}
    assert states["b"].counts[PENDING] == 3
    assert not any(q.estimated for q in states.values())


async def test_past_the_cap_a_count_is_estimated_and_marked(
    queue: Any, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(counts, "EXACT_ROWS", 5)
    monkeypatch.setattr(counts, "CAP", 4)
    await fill(queue, raw)
    raw.rows("ANALYZE {table}")
    stats = await queue.stats()
    assert not stats.exact and stats.estimated == {"pending"}
    # Counted exactly, through their indexes: under the cap.
    assert (stats.by_status[RUNNING], stats.by_status[DEAD]) == (2, 1)
    # The planner's rows less the exact counts.
    assert stats.by_status[PENDING] == 12
    # By queue: lower bounds, up to the cap.
    assert stats.by_queue["default"][PENDING] == 4 and stats.by_queue["b"][PENDING] == 3
    states = {q.name: q for q in await queue.queues()}
    assert states["default"].estimated == {PENDING} and states["b"].estimated == frozenset()
    assert states["b"].counts[PENDING] == 3


async def test_a_count_past_the_cap_is_never_less_than_what_was_read(
    queue: Any, raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(counts, "EXACT_ROWS", 5)
    monkeypatch.setattr(counts, "CAP", 4)
    await fill(queue, raw)
    # Statistics that say the table is empty.
    raw.rows("DELETE FROM {table}")
    raw.rows("VACUUM {table}")
    await fill(queue, raw)
    stats = await queue.stats()
    assert "pending" in stats.estimated
    assert stats.by_status[PENDING] >= 5
