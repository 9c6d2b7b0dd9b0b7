"""What operators do to a queue: list jobs, revive or purge the dead, read the
leases that ran out. The same tests on sync, asyncio and trio."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from pgqueue import JobStatus

from ..conftest import Raw

pytestmark = pytest.mark.anyio


async def bury(queue: Any, kind: str, payload: Any = None) -> int:
    """Enqueue a job of ``kind`` and fail its only attempt: it is dead."""
    job_id = await queue.enqueue(kind, payload, max_attempts=1)
    [job] = await queue.claim(1, kinds=[kind], worker="w")
    assert job.id == job_id
    assert await queue.fail(job, f"{kind} broke") is JobStatus.DEAD
    return int(job_id)


def table_snapshot(raw: Raw) -> list[tuple[Any, ...]]:
    return raw.rows(
        "SELECT id, kind, status, attempts, run_at, locked_by, last_error FROM {table} ORDER BY id"
    )


# -- jobs ----------------------------------------------------------------------


async def test_jobs_lists_every_job_in_id_order(queue: Any) -> None:
    ids = await queue.enqueue_many([("b", 1), ("a", 2), ("c", 3)])
    jobs = await queue.jobs()
    assert [(j.id, j.kind, j.payload) for j in jobs] == list(
        zip(ids, ["b", "a", "c"], [1, 2, 3], strict=True)
    )
    assert all(j.status is JobStatus.PENDING for j in jobs)


async def test_jobs_filters_by_status_and_kinds(queue: Any) -> None:
    pending_a = await queue.enqueue("a")
    dead_a = await bury(queue, "a_dead_kind")
    [running_b] = await queue.enqueue_many([("b", None)])
    await queue.claim(1, kinds=["b"], worker="w")
    pending_c = await queue.enqueue("c")

    assert [j.id for j in await queue.jobs(status=JobStatus.RUNNING)] == [running_b]
    assert [j.id for j in await queue.jobs(status="dead")] == [dead_a]
    assert [j.id for j in await queue.jobs(status="pending")] == [pending_a, pending_c]
    assert [j.id for j in await queue.jobs(kinds=["c", "a"])] == [pending_a, pending_c]
    assert [j.id for j in await queue.jobs(status="running", kinds=["a"])] == []
    dead = await queue.jobs(status="dead", kinds=["a_dead_kind"])
    assert [(j.id, j.last_error, j.attempts) for j in dead] == [(dead_a, "a_dead_kind broke", 1)]


async def test_jobs_pages_with_limit_and_after_id(queue: Any) -> None:
    ids = await queue.enqueue_many([("k", i) for i in range(7)])
    pages: list[list[int]] = []
    after = None
    while page := await queue.jobs(limit=3, after_id=after):
        pages.append([j.id for j in page])
        after = page[-1].id
    assert pages == [ids[0:3], ids[3:6], ids[6:7]]


async def test_jobs_of_an_empty_queue_is_an_empty_list(queue: Any) -> None:
    assert await queue.jobs() == []
    assert await queue.jobs(status="dead", kinds=["nothing"]) == []


# -- retry_dead ------------------------------------------------------------------


async def test_retry_dead_revives_every_dead_job_with_fresh_attempts(queue: Any, raw: Raw) -> None:
    dead = [await bury(queue, "a"), await bury(queue, "b")]
    pending = await queue.enqueue("c", delay=timedelta(hours=1))
    running = await queue.enqueue("d")
    await queue.claim(1, kinds=["d"], worker="busy")

    assert await queue.retry_dead() == 2

    rows = {r[0]: r[1:] for r in raw.rows(
        "SELECT id, status, attempts, run_at <= now(), locked_by, last_error FROM {table}"
    )}  # fmt: skip
    assert rows[dead[0]] == ("pending", 0, True, None, "a broke")
    assert rows[dead[1]] == ("pending", 0, True, None, "b broke")
    assert rows[pending] == ("pending", 0, False, None, None)
    assert rows[running] == ("running", 1, True, "busy", None)
    claimed = await queue.claim(10, kinds=["a", "b"])
    assert sorted(j.id for j in claimed) == dead
    assert all(j.attempts == 1 for j in claimed)


async def test_retry_dead_restricted_to_kinds_leaves_other_dead_jobs(queue: Any) -> None:
    a, b, c = await bury(queue, "a"), await bury(queue, "b"), await bury(queue, "c")
    assert await queue.retry_dead(kinds=["a", "c", "no_such_kind"]) == 2
    assert [j.id for j in await queue.jobs(status="dead")] == [b]
    assert [j.id for j in await queue.jobs(status="pending")] == [a, c]


async def test_retry_dead_with_no_dead_job_changes_nothing(queue: Any, raw: Raw) -> None:
    await queue.enqueue("a")
    await queue.enqueue("b")
    await queue.claim(1, worker="w")
    before = table_snapshot(raw)
    assert await queue.retry_dead() == 0
    assert table_snapshot(raw) == before


async def test_retry_dead_wakes_listeners_once_per_kind(queue: Any, raw: Raw) -> None:
    for kind in ["a", "a", "a", "b"]:
        await bury(queue, kind)
    raw.conn.execute(queue.core.sql.listen)
    assert await queue.retry_dead() == 4
    notes = list(raw.conn.notifies(timeout=0.5))
    assert sorted(n.payload for n in notes) == ["a", "b"]
    assert {n.channel for n in notes} == {queue.core.channel}


# -- purge_dead ------------------------------------------------------------------


async def test_purge_dead_deletes_only_dead_jobs_older_than_the_cutoff(
    queue: Any, raw: Raw
) -> None:
    old, recent = await bury(queue, "a"), await bury(queue, "a")
    old_pending = await queue.enqueue("a")
    raw.rows(
        "UPDATE {table} SET run_at = now() - interval '8 days' WHERE id = ANY(%s)",
        [old, old_pending],
    )
    assert await queue.purge_dead(timedelta(days=7)) == 1
    assert sorted(r[0] for r in raw.rows("SELECT id FROM {table}")) == [recent, old_pending]
    assert await queue.purge_dead(timedelta(days=7)) == 0


async def test_purge_dead_restricted_to_kinds(queue: Any, raw: Raw) -> None:
    a, b = await bury(queue, "a"), await bury(queue, "b")
    raw.rows("UPDATE {table} SET run_at = now() - interval '1 day'")
    assert await queue.purge_dead(timedelta(hours=1), kinds=["b"]) == 1
    assert [r[0] for r in raw.rows("SELECT id FROM {table}")] == [a]
    assert b not in [j.id for j in await queue.jobs()]


async def test_purge_dead_of_zero_age_deletes_every_dead_job_and_nothing_else(
    queue: Any, raw: Raw
) -> None:
    for kind in ["a", "b", "c"]:
        await bury(queue, kind)
    pending = await queue.enqueue("d")
    # Dead jobs whose last attempt was due a moment ago, not in the future.
    raw.rows("UPDATE {table} SET run_at = now() - interval '1 second' WHERE status = 'dead'")
    assert await queue.purge_dead(timedelta(0)) == 3
    assert raw.rows("SELECT id, status FROM {table}") == [(pending, "pending")]


# -- stats -----------------------------------------------------------------------


async def test_stats_counts_running_jobs_past_their_lease(queue: Any, raw: Raw) -> None:
    stale, late, fresh = await queue.enqueue_many([("a", 1), ("b", 2), ("b", 3)])
    await queue.enqueue("idle")
    await queue.claim(3, kinds=["a", "b"], worker="w")
    raw.rows("UPDATE {table} SET locked_at = now() - interval '10 minutes' WHERE id = %s", stale)
    raw.rows("UPDATE {table} SET locked_at = now() - interval '2 minutes' WHERE id = %s", late)

    assert (await queue.stats()).expired == 1  # the workers' default lease: 5 minutes
    assert (await queue.stats(timedelta(minutes=1))).expired == 2
    assert (await queue.stats(visibility_timeout=timedelta(hours=1))).expired == 0
    stats = await queue.stats()
    assert stats.by_status[JobStatus.RUNNING] == 3 and stats.total == 4
    # Reading the stats reaps nothing.
    assert raw.count("status = 'running'") == 3
    assert fresh in {r[0] for r in raw.rows("SELECT id FROM {table} WHERE status = 'running'")}


async def test_stats_oldest_pending_age_counts_only_jobs_ready_to_run(queue: Any, raw: Raw) -> None:
    later = await queue.enqueue("a", delay=timedelta(hours=1))
    stats = await queue.stats()
    assert stats.oldest_pending_age is None
    assert stats.by_status[JobStatus.PENDING] == 1 and stats.expired == 0

    raw.rows("UPDATE {table} SET run_at = now() - interval '2 hours' WHERE id = %s", later)
    await queue.enqueue("b")
    age = (await queue.stats()).oldest_pending_age
    assert age is not None and age >= timedelta(hours=2)


# -- bad input -------------------------------------------------------------------

BAD_CALLS: list[tuple[str, str, dict[str, Any], type[Exception], str]] = [
    ("jobs limit 0", "jobs", {"limit": 0}, ValueError, "limit must be at least 1"),
    ("jobs negative limit", "jobs", {"limit": -5}, ValueError, "limit must be at least 1"),
    ("jobs limit as text", "jobs", {"limit": "10"}, TypeError, "limit must be an int"),
    ("jobs unknown status", "jobs", {"status": "done"}, ValueError, "unknown job status 'done'"),
    ("jobs status not text", "jobs", {"status": 3}, TypeError, "status must be"),
    ("jobs kinds a str", "jobs", {"kinds": "abc"}, TypeError, "not a single str"),
    ("jobs no kinds", "jobs", {"kinds": []}, ValueError, "at least one kind"),
    ("jobs empty kind", "jobs", {"kinds": [""]}, ValueError, "empty"),
    ("jobs after_id bool", "jobs", {"after_id": True}, TypeError, "after_id must be an int"),
    ("retry_dead no kinds", "retry_dead", {"kinds": []}, ValueError, "at least one kind"),
    ("retry_dead kinds a str", "retry_dead", {"kinds": "a"}, TypeError, "not a single str"),
    ("purge negative", "purge_dead", {"older_than": timedelta(-1)}, ValueError, "negative"),
    ("purge seconds", "purge_dead", {"older_than": 3600}, TypeError, "timedelta"),
    (
        "purge no kinds",
        "purge_dead",
        {"older_than": timedelta(0), "kinds": []},
        ValueError,
        "at least one kind",
    ),
    ("stats zero lease", "stats", {"visibility_timeout": timedelta(0)}, ValueError, "positive"),
    ("stats negative", "stats", {"visibility_timeout": timedelta(-1)}, ValueError, "positive"),
    ("stats seconds", "stats", {"visibility_timeout": 300}, TypeError, "timedelta"),
]


@pytest.mark.parametrize(
    ("method", "kwargs", "error", "words"),
    [case[1:] for case in BAD_CALLS],
    ids=[case[0] for case in BAD_CALLS],
)
async def test_bad_operator_call_raises_a_clear_error_and_writes_nothing(
    queue: Any,
    raw: Raw,
    method: str,
    kwargs: dict[str, Any],
    error: type[Exception],
    words: str,
) -> None:
    await bury(queue, "a")
    await queue.enqueue("b")
    raw.rows("UPDATE {table} SET run_at = now() - interval '1 day'")
    before = table_snapshot(raw)
    with pytest.raises(error, match=words):
        await getattr(queue, method)(**kwargs)
    assert table_snapshot(raw) == before
