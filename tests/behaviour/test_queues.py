"""Named queues and priorities (SPEC §5) on sync, asyncio and trio.

Within what a claim serves, a higher priority is always taken first, and
equal priorities go in ``run_at, id`` order whatever queue they are in. A
claim or worker given ``queues`` takes those only; a paused queue is not
claimed by anyone, still accepts jobs, and its resumption wakes idle
workers. (That the claim reads O(batch) whatever else the table holds is
`test_claim_plans`.)
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.to_thread
import pytest

from pgqueue import JobSpec, JobStatus, QueueState

from ..backends import WorkerUnderTest
from ..conftest import Raw

pytestmark = pytest.mark.anyio

# Generous: a deadline for "it happened at all", never a performance claim.
PATIENCE = 20


async def claim_one_by_one(queue: Any, **claim: Any) -> list[int]:
    """The ids of every ready job, in the order claims of one take them."""
    taken: list[int] = []
    while jobs := await queue.claim(1, **claim):
        taken += [job.id for job in jobs]
    return taken


async def test_a_higher_priority_job_is_claimed_before_earlier_lower_ones(queue: Any) -> None:
    low = await queue.enqueue("k", priority=-5, run_at=datetime.now(UTC) - timedelta(hours=1))
    normal = await queue.enqueue("k")
    high = await queue.enqueue("k", priority=10)
    top = await queue.enqueue("k", priority=100, queue="other")
    assert await claim_one_by_one(queue) == [top, high, normal, low]


async def test_a_batch_is_highest_priority_first(queue: Any) -> None:
    ids = {p: await queue.enqueue("k", priority=p) for p in (0, -100, 50, 100, -1)}
    jobs = await queue.claim(3)
    assert [(j.id, j.priority) for j in jobs] == [(ids[p], p) for p in (100, 50, 0)]


async def test_equal_priorities_go_in_run_at_then_id_order_across_queues(queue: Any) -> None:
    now = datetime.now(UTC)
    b1 = await queue.enqueue("k", queue="b", run_at=now - timedelta(seconds=3))
    a1 = await queue.enqueue("k", queue="a", run_at=now - timedelta(seconds=4))
    a2 = await queue.enqueue("k", queue="a", run_at=now - timedelta(seconds=2))
    b2 = await queue.enqueue("k", queue="b", run_at=now - timedelta(seconds=2))  # a2's run_at
    b3 = await queue.enqueue("k", queue="b", run_at=now - timedelta(seconds=1))
    later = await queue.enqueue("k", queue="a", run_at=now + timedelta(hours=1))
    assert await claim_one_by_one(queue) == [a1, b1, a2, b2, b3]
    assert (await queue.get(later)).status is JobStatus.PENDING


async def test_a_claim_given_queues_takes_only_those_queues(queue: Any, raw: Raw) -> None:
    ids = {q: await queue.enqueue_many([JobSpec("k", queue=q)] * 3) for q in ("a", "b", "c")}
    jobs = await queue.claim(20, queues=["c", "a", "none-yet"])
    assert sorted(j.id for j in jobs) == sorted(ids["a"] + ids["c"])
    assert {j.queue for j in jobs} == {"a", "c"}
    assert raw.count("status = 'pending'") == 3
    assert await queue.claim(20, queues=["a", "c"]) == []
    assert sorted(j.id for j in await queue.claim(20)) == ids["b"]


async def test_a_claim_given_queues_and_kinds_takes_both_filters(queue: Any) -> None:
    wanted = await queue.enqueue("mail", queue="a")
    await queue.enqueue("sms", queue="a")
    await queue.enqueue("mail", queue="b")
    jobs = await queue.claim(20, queues=["a"], kinds=["mail"])
    assert [j.id for j in jobs] == [wanted]


async def test_a_worker_given_queues_runs_only_those_queues(
    queue: Any, raw: Raw, backend: str
) -> None:
    handled: list[str] = []
    await queue.enqueue_many([JobSpec("k", {"n": n}, queue="mine") for n in range(30)])
    others = await queue.enqueue_many([JobSpec("k", queue="theirs") for _ in range(10)])
    worker = WorkerUnderTest(
        backend, queue, {"k": lambda job: handled.append(job.queue)}, queues=["mine"], batch_size=7
    )
    await worker.run(until_empty=True)
    assert handled == ["mine"] * 30
    pending = raw.rows("SELECT id FROM {table} WHERE status = 'pending' ORDER BY id")
    assert [r[0] for r in pending] == others


async def test_a_worker_runs_a_batch_higher_priorities_first(queue: Any, backend: str) -> None:
    # One claim takes the lot. (With smaller batches, a worker whose runners
    # ran dry sends two claims side by side, and the one that lands first
    # may hold the lower priorities: docs/queues.md, "jobs someone else is
    # claiming".)
    order: list[int] = []
    await queue.enqueue_many([JobSpec("k", priority=p) for p in (-3, 0, 7, 7, 2, -3, 100)])
    worker = WorkerUnderTest(
        backend, queue, {"k": lambda job: order.append(job.priority)}, concurrency=1, batch_size=10
    )
    await worker.run(until_empty=True)
    assert order == [100, 7, 7, 2, 0, -3, -3]


async def test_a_paused_queue_is_not_claimed_and_still_accepts_jobs(
    queue: Any, raw: Raw, backend: str
) -> None:
    await queue.pause_queue("held")
    held = await queue.enqueue("k", queue="held", priority=100)
    held_too = await queue.enqueue_many([JobSpec("k", queue="held")] * 3)
    free = await queue.enqueue("k")
    assert raw.count("queue = 'held'") == 4

    assert [j.id for j in await queue.claim(20)] == [free]
    assert await queue.claim(20, queues=["held"]) == []
    handled: list[int] = []
    await WorkerUnderTest(backend, queue, {"k": lambda job: handled.append(job.id)}).run(
        until_empty=True
    )
    assert handled == []
    assert raw.count("queue = 'held' AND status = 'pending'") == 4

    await queue.resume_queue("held")
    assert [j.id for j in await queue.claim(20)] == [held, *held_too]


async def test_pausing_is_idempotent_and_resuming_an_unknown_queue_is_harmless(
    queue: Any,
) -> None:
    await queue.pause_queue("a")
    await queue.pause_queue("a")
    await queue.resume_queue("never-paused")
    job = await queue.enqueue("k", queue="never-paused")
    assert [j.id for j in await queue.claim(20)] == [job]


async def test_resuming_a_queue_wakes_an_idle_worker(queue: Any, raw: Raw, backend: str) -> None:
    # The worker polls once a minute: only the resumption's notification can
    # start the job within PATIENCE.
    handled = threading.Event()
    await queue.pause_queue("held")
    await queue.enqueue("k", queue="held")
    worker = WorkerUnderTest(backend, queue, {"k": lambda job: handled.set()}, poll_interval=60)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        # The worker listens once a first claim came back (empty: the queue is paused).
        with anyio.fail_after(PATIENCE):
            while not listening(raw, queue):  # noqa: ASYNC110 - the state is in the database
                await anyio.sleep(0.05)
        assert not handled.is_set()
        await queue.resume_queue("held")
        assert await anyio.to_thread.run_sync(handled.wait, PATIENCE)
        worker.stop()


def listening(raw: Raw, queue: Any) -> bool:
    """Whether a session of the server last ran the queue's LISTEN (the worker's listener)."""
    listen = queue.core.sql.listen.decode()
    return bool(raw.rows("SELECT pid FROM pg_stat_activity WHERE query = %s", listen))


async def test_queues_lists_each_queue_with_its_counts_and_pause(queue: Any) -> None:
    assert await queue.queues() == []
    await queue.enqueue_many([JobSpec("k", queue="a")] * 2)
    await queue.enqueue("k")
    await queue.claim(1, queues=["a"])
    await queue.pause_queue("quiet")
    await queue.pause_queue("a")

    def counts(pending: int = 0, running: int = 0, dead: int = 0) -> dict[JobStatus, int]:
        return {
            JobStatus.PENDING: pending,
            JobStatus.RUNNING: running,
            JobStatus.DEAD: dead,
            JobStatus.WAITING: 0,
        }

    assert await queue.queues() == [
        QueueState("a", True, counts(pending=1, running=1)),
        QueueState("default", False, counts(pending=1)),
        QueueState("quiet", True, counts()),
    ]
    await queue.resume_queue("a")
    assert [(s.name, s.paused) for s in await queue.queues()] == [
        ("a", False),
        ("default", False),
        ("quiet", True),
    ]


@pytest.mark.parametrize("size", [5, 250], ids=["arrays", "copy"])
async def test_enqueue_many_keeps_each_jobs_queue_and_priority(
    queue: Any, raw: Raw, size: int
) -> None:
    specs: list[Any] = [
        JobSpec("k", {"n": n}, queue=f"q{n % 3}", priority=(n % 201) - 100) for n in range(size)
    ]
    specs.append(("plain", None))  # a tuple: the default queue and priority
    ids = await queue.enqueue_many(specs)
    stored = raw.rows("SELECT id, queue, priority FROM {table} ORDER BY id")
    expected = [(i, s.queue, s.priority) for i, s in zip(ids, specs[:-1], strict=False)]
    assert stored == [*expected, (ids[-1], "default", 0)]
    job = await queue.get(ids[0])
    assert (job.queue, job.priority) == ("q0", -100)


# A single enqueue of each is in test_bad_input; here, one bad spec in a batch.
BAD_SPECS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("priority above 100", {"priority": 101}, ValueError, "priority"),
    ("priority below -100", {"priority": -101}, ValueError, "priority"),
    ("bool priority", {"priority": True}, TypeError, "priority"),
    ("empty queue name", {"queue": ""}, ValueError, "queue name"),
    ("NUL in queue name", {"queue": "a\x00"}, ValueError, "queue name"),
    ("huge queue name", {"queue": "q" * 256}, ValueError, "queue name"),
]


@pytest.mark.parametrize("size", [3, 250], ids=["arrays", "copy"])
@pytest.mark.parametrize(
    ("fields", "error", "words"),
    [case[1:] for case in BAD_SPECS],
    ids=[case[0] for case in BAD_SPECS],
)
async def test_one_bad_queue_or_priority_in_a_batch_writes_nothing(
    queue: Any, raw: Raw, fields: dict[str, Any], error: type[Exception], words: str, size: int
) -> None:
    specs: list[Any] = [JobSpec("ok", n, queue="a", priority=5) for n in range(size)]
    specs.insert(size // 2, JobSpec("k", **fields))
    with pytest.raises(error, match=words):
        await queue.enqueue_many(specs)
    assert raw.count() == 0


async def test_queues_must_be_a_collection_of_names(queue: Any, raw: Raw, backend: str) -> None:
    await queue.enqueue("k", queue="a")
    for bad, error, words in [
        ("a", TypeError, "single str"),
        ([], ValueError, "at least one queue"),
        ([""], ValueError, "queue name"),
        ([7], TypeError, "queue name"),
    ]:
        with pytest.raises(error, match=words):
            await queue.claim(queues=bad)
        with pytest.raises(error, match=words):
            WorkerUnderTest(backend, queue, {"k": print}, queues=bad)
    for bad_name, error in [("", ValueError), (None, TypeError)]:
        with pytest.raises(error, match="queue name"):
            await queue.pause_queue(bad_name)
    assert raw.rows("SELECT status FROM {table}") == [("pending",)]
    assert await queue.queues() == [
        QueueState(
            "a",
            False,
            {JobStatus.PENDING: 1, JobStatus.RUNNING: 0, JobStatus.DEAD: 0, JobStatus.WAITING: 0},
        )
    ]
