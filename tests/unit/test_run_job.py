"""`pgqueue.testing.run_job` and friends: one handler on a built job, no database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import pgqueue
from pgqueue.testing import arun_job, build_job, run_job, task_job

# A queue that never connects: tasks are registered on it, nothing is enqueued.
queue = pgqueue.Queue("postgresql://127.0.0.1:1/never")
aqueue = pgqueue.AsyncQueue("postgresql://127.0.0.1:1/never")


@queue.task(kind="shop.total")
def total(prices: list[float], *, discount: float = 0.0) -> float:
    return sum(prices) - discount


@aqueue.task(kind="shop.refund")
async def refund(order_id: int) -> str:
    await anyio.lowlevel.checkpoint()
    return f"refunded {order_id} in job {pgqueue.job_context().job.id}"


def test_build_job_is_a_running_first_attempt_with_the_fields_given() -> None:
    job = build_job("send_receipt", {"order_id": 42}, id=7, attempts=2, queue="mail")

    assert (job.id, job.kind, job.payload, job.attempts) == (7, "send_receipt", {"order_id": 42}, 2)
    assert job.status is pgqueue.JobStatus.RUNNING and job.queue == "mail"


def test_build_job_sends_the_payload_through_json_and_refuses_unknown_fields() -> None:
    assert build_job("k", {"at": (1, 2)}).payload == {"at": [1, 2]}
    with pytest.raises(TypeError, match="no field colour"):
        build_job("k", colour="red")


def test_run_job_runs_a_handler_in_its_job_context_and_returns_its_value() -> None:
    def handler(job: pgqueue.Job) -> Any:
        ctx = pgqueue.job_context()
        return ctx.job is job, ctx.cancel_requested, job.payload["n"] * 2

    assert run_job(handler, build_job("double", {"n": 21})) == (True, False, 42)


def test_run_job_raises_what_the_handler_raises() -> None:
    def handler(job: pgqueue.Job) -> None:
        raise LookupError("no order 42")

    with pytest.raises(LookupError, match="no order 42"):
        run_job(handler, build_job("k"))


def test_run_job_runs_a_task_on_the_job_its_enqueue_would_write() -> None:
    job = task_job(total, [1.5, 2.5], discount=1.0)

    assert job.kind == "shop.total"
    assert job.payload == {"args": [[1.5, 2.5]], "kwargs": {"discount": 1.0}}
    assert run_job(total, job) == 3.0


def test_task_job_refuses_arguments_the_task_would_refuse() -> None:
    with pytest.raises(TypeError, match=r"bad arguments for task shop\.total"):
        task_job(total, [1.0], colour="red")


def test_run_job_runs_an_async_task_on_an_event_loop_of_its_own() -> None:
    assert run_job(refund, task_job(refund, 9)) == "refunded 9 in job 1"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_arun_job_awaits_an_async_handler_and_runs_a_plain_one_in_a_thread(
    anyio_backend: str,
) -> None:
    assert await arun_job(refund, task_job(refund, 3)) == "refunded 3 in job 1"
    assert await arun_job(total, task_job(total, [1.0])) == 1.0
    with pytest.raises(TypeError, match=r"expected a pgqueue\.Job"):
        await arun_job(total, {"args": []})  # type: ignore[arg-type]


def test_run_job_keeps_the_jobs_result_ttl_rule() -> None:
    job = build_job("k", result_ttl=timedelta(minutes=1))
    with pytest.raises(Exception, match="cannot be kept as JSON"):
        run_job(lambda job: object(), job)
