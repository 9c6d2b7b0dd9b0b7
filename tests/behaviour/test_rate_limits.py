"""Rate limits (`set_rate`): a token bucket per limit key, on sync, asyncio
and trio, against a real server.

Time is moved by hand: a bucket refills from its ``refilled_at``, which a
test sets back to stand for seconds gone by (no test waits for a clock).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import anyio
import pytest

import pgqueue
from pgqueue import JobSpec
from pgqueue.core.ops import WorkerClaim

from ..backends import WorkerUnderTest, open_queue
from ..conftest import Raw
from .test_job_control import PATIENCE, side_rows

pytestmark = pytest.mark.anyio

# A rate so slow that no token comes back while a test runs.
STILL = 0.0001


def age_bucket(raw: Raw, table: str, key: str, seconds: float) -> None:
    """Stand for ``seconds`` gone by since the key's bucket was last filled."""
    side_rows(
        raw,
        table,
        "UPDATE {limits} SET refilled_at = refilled_at - make_interval(secs => %s)"
        " WHERE limit_key = %s",
        seconds,
        key,
    )


async def enqueue_limited(queue: Any, key: str, n: int) -> list[int]:
    ids: list[int] = await queue.enqueue_many([JobSpec("k", i, limit_key=key) for i in range(n)])
    return ids


async def test_a_rate_lets_a_burst_start_then_holds_the_rest_back(queue: Any) -> None:
    await queue.set_limit("api", 100)
    await queue.set_rate("api", STILL, burst=3)
    ids = await enqueue_limited(queue, "api", 5)
    assert [j.id for j in await queue.claim(10, worker="w")] == ids[:3]
    # The concurrency limit is not what holds them: the jobs ran and went.
    await queue.complete(*ids[:3])
    assert await queue.claim(10, worker="w") == []
    [state] = await queue.limits()
    assert (state.per_second, state.burst, state.running, state.waiting) == (STILL, 3, 0, 2)
    assert state.tokens is not None and 0 <= state.tokens < 1


async def test_tokens_come_back_at_the_rate_and_never_past_the_burst(queue: Any, raw: Raw) -> None:
    await queue.set_limit("api", 100)
    await queue.set_rate("api", 2.0, burst=4)
    ids = await enqueue_limited(queue, "api", 20)
    assert len(await queue.claim(20, worker="w")) == 4
    age_bucket(raw, queue.table, "api", 1.0)  # two tokens at 2 a second
    assert [j.id for j in await queue.claim(20, worker="w")] == ids[4:6]
    age_bucket(raw, queue.table, "api", 3600.0)  # an hour: still only the burst
    assert [j.id for j in await queue.claim(20, worker="w")] == ids[6:10]


async def test_the_concurrency_limit_still_holds_beside_a_rate(queue: Any, raw: Raw) -> None:
    await queue.set_rate("api", 1000.0)  # no limit set: one job at a time
    first, second = await enqueue_limited(queue, "api", 2)
    assert [j.id for j in await queue.claim(10, worker="w")] == [first]
    assert await queue.claim(10, worker="w") == []
    await queue.complete(first)
    age_bucket(raw, queue.table, "api", 1.0)
    assert [j.id for j in await queue.claim(10, worker="w")] == [second]


async def test_a_rate_taken_away_holds_nothing_back(queue: Any) -> None:
    await queue.set_limit("api", 100)
    await queue.set_rate("api", STILL, burst=1)
    ids = await enqueue_limited(queue, "api", 3)
    assert len(await queue.claim(10, worker="w")) == 1
    assert await queue.claim(10, worker="w") == []
    await queue.set_rate("api", None)
    assert [j.id for j in await queue.claim(10, worker="w")] == ids[1:]
    [state] = await queue.limits()
    assert (state.per_second, state.burst, state.tokens) == (None, None, None)


async def test_a_new_rate_keeps_the_tokens_left_up_to_its_burst(queue: Any) -> None:
    await queue.set_limit("api", 100)
    await queue.set_rate("api", STILL, burst=5)
    await enqueue_limited(queue, "api", 10)
    assert len(await queue.claim(3, worker="w")) == 3
    await queue.set_rate("api", STILL, burst=10)  # two left, not ten
    assert len(await queue.claim(10, worker="w")) == 2


async def test_other_keys_and_unlimited_jobs_are_not_held_back_by_a_rate(queue: Any) -> None:
    await queue.set_limit("slow", 100)
    await queue.set_rate("slow", STILL, burst=1)
    slow = await enqueue_limited(queue, "slow", 3)
    other = await enqueue_limited(queue, "other", 1)
    free = await queue.enqueue_many([("free", i) for i in range(3)])
    claimed = [j.id for j in await queue.claim(10, worker="w")]
    assert sorted(claimed) == sorted([slow[0], *other, *free])


async def test_concurrent_claimers_never_start_more_than_the_tokens(
    dsn: str, table: str, backend: str, raw: Raw
) -> None:
    claimers, burst = 8, 5
    async with open_queue(backend, dsn, table=table, max_connections=claimers) as q:
        await q.install()
        await q.set_limit("api", 100)
        await q.set_rate("api", STILL, burst=burst)
        await enqueue_limited(q, "api", 40)
        for refill in range(3):
            claimed: list[Any] = []

            async def claimer(n: int, claimed: list[Any] = claimed) -> None:
                claimed.extend(await q.claim(4, worker=f"c{n}"))

            async with anyio.create_task_group() as tg:
                for n in range(claimers):
                    tg.start_soon(claimer, n)
            # Claimers that found the bucket held by another took nothing of
            # the key: never more than the tokens, and none lost.
            assert len(claimed) <= burst
            await q.complete(*claimed)
            late = [await q.claim(4, worker="late") for _ in range(3)]
            assert len(claimed) + sum(map(len, late)) == burst, refill
            age_bucket(raw, table, "api", burst / STILL)


async def test_a_workers_turn_says_when_the_next_token_is_due(queue: Any, raw: Raw) -> None:
    await queue.set_limit("api", 100)
    await queue.set_rate("api", 0.5, burst=1)  # a token every 2 s
    await enqueue_limited(queue, "api", 3)
    turn = await queue._turn([], [], WorkerClaim.of("w"), 10)
    assert len(turn.claimed) == 1
    assert turn.token_in is not None and 0 < turn.token_in <= 2.0
    age_bucket(raw, queue.table, "api", 1.0)
    turn = await queue._turn([], [], WorkerClaim.of("w"), 10)
    assert turn.claimed == []
    assert turn.token_in is not None and 0 < turn.token_in <= 1.0
    # Without a rate, or with jobs of no key waiting, a turn says nothing.
    await queue.set_rate("api", None)
    turn = await queue._turn([], [], WorkerClaim.of("w"), 10)
    assert (len(turn.claimed), turn.token_in) == (2, None)


async def test_an_idle_worker_wakes_when_a_token_is_due_not_at_its_poll(
    queue: Any, backend: str
) -> None:
    # A rate of 20 a second with a burst of 1, and a poll of a minute: the
    # ten jobs run within a second or so only if the worker wakes for each
    # token; by its poll they would take ten minutes.
    await queue.set_limit("api", 100)
    await queue.set_rate("api", 20.0, burst=1)
    ids = await enqueue_limited(queue, "api", 10)
    ran: list[int] = []
    done = threading.Event()

    def handler(job: pgqueue.Job) -> None:
        ran.append(job.id)
        if len(ran) == len(ids):
            done.set()

    worker = WorkerUnderTest(backend, queue, {"k": handler}, poll_interval=60.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        try:
            assert await anyio.to_thread.run_sync(done.wait, PATIENCE)
        finally:
            worker.stop()
    assert sorted(ran) == ids


@pytest.mark.parametrize(
    ("per_second", "burst", "error"),
    [
        (0, None, ValueError),
        (-1.0, None, ValueError),
        (math.nan, None, ValueError),
        (math.inf, None, ValueError),
        (2_000_000.0, None, ValueError),
        ("10", None, TypeError),
        (True, None, TypeError),
        (1.0, 0, ValueError),
        (1.0, 2.5, TypeError),
        (None, 3, ValueError),
    ],
)
async def test_bad_rates_are_refused_and_nothing_is_written(
    queue: Any, per_second: Any, burst: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await queue.set_rate("api", per_second, burst=burst)
    with pytest.raises(TypeError):
        await queue.set_rate(7, 1.0)
    assert await queue.limits() == []
