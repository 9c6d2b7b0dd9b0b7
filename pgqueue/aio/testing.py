"""The testing helpers for an `AsyncQueue` (`pgqueue.testing`): what is enqueued, drain.

This module is the source of `pgqueue.sync.testing`, which
``tools/unasync.py`` generates from it; edit this one. The decisions are
`pgqueue.core.draining`'s; here, the I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..core import draining
from ..core.draining import Drained, handler_call, returned
from ..core.jobs import Job
from .driver import CallerConnection
from .inline import run_call
from .queue import AsyncQueue

__all__ = ["Drained", "aassert_enqueued", "aassert_not_enqueued", "adrain", "aenqueued", "arun_job"]


def _checked(q: object) -> AsyncQueue:
    if not isinstance(q, AsyncQueue):
        raise draining.wrong_queue(q, "AsyncQueue")
    return q


async def aenqueued(
    q: AsyncQueue,
    kind: str | None = None,
    *,
    payload: Any = None,
    queue: str | None = None,
    conn: CallerConnection | None = None,
) -> list[Job]:
    """The pending and waiting jobs of ``kind`` (any if None), in id order.

    ``payload`` matches by JSON containment: ``{"order_id": 42}`` matches
    ``{"order_id": 42, "resend": false}``. ``queue`` keeps those of one
    queue. ``conn`` reads on the caller's connection (a job enqueued in its
    open transaction is seen).
    """
    checked = _checked(q)
    op = draining.enqueued(checked.core, kind, payload, queue)
    return await checked._driver.run(op, conn)


async def aassert_enqueued(
    q: AsyncQueue,
    kind: str | None = None,
    *,
    payload: Any = None,
    queue: str | None = None,
    count: int | None = None,
    conn: CallerConnection | None = None,
) -> list[Job]:
    """Assert that a job (or ``count`` jobs) of ``kind`` is enqueued, as
    `aenqueued` finds them; return them. The `AssertionError` lists every
    job enqueued, so that a near miss shows."""
    found = await aenqueued(q, kind, payload=payload, queue=queue, conn=conn)
    if (not found) if count is None else len(found) != count:
        every = await aenqueued(q, conn=conn)
        wanted = draining.describe_wanted("expected", kind, payload, queue, count)
        raise AssertionError(draining.enqueued_message(wanted, found, every))
    return found


async def aassert_not_enqueued(
    q: AsyncQueue,
    kind: str | None = None,
    *,
    payload: Any = None,
    queue: str | None = None,
    conn: CallerConnection | None = None,
) -> None:
    """Assert that no job of ``kind`` (matched as `aenqueued` does) is enqueued."""
    found = await aenqueued(q, kind, payload=payload, queue=queue, conn=conn)
    if found:
        every = await aenqueued(q, conn=conn)
        wanted = draining.describe_wanted("expected no", kind, payload, queue, None)
        raise AssertionError(draining.enqueued_message(wanted, found, every))


async def adrain(
    q: AsyncQueue,
    handlers: Mapping[str, Callable[..., Any]] | None = None,
    *,
    queues: Iterable[str] | None = None,
    with_scheduled: bool = False,
    conn: CallerConnection | None = None,
    max_runs: int = draining.MAX_RUNS,
) -> Drained:
    """Run the ready jobs one at a time, here, until none is ready; say what ran.

    Each job is claimed and its outcome recorded by the statements a
    worker uses; a failed job is retried at once (its attempts count, so
    ``dead`` lists the jobs that failed every one), and the jobs the
    handlers enqueue run too. ``handlers=None``: the queue's tasks (else
    these handlers, and the tasks). ``queues`` keeps to those queues;
    ``with_scheduled=True`` also runs the jobs due later. An ``async def``
    handler is awaited in this task, a plain one runs in a worker thread,
    each in its job's `pgqueue.job_context()`. ``conn`` runs the claims
    and outcomes on the caller's connection (inside its transaction).
    After ``max_runs`` runs, one more ready job raises `RuntimeError`
    (handlers that enqueue jobs forever).
    """
    checked = _checked(q)
    driver = checked._driver
    run = draining.Drain(checked.core, checked.tasks.handlers(handlers), queues=queues,
                         with_scheduled=with_scheduled, max_runs=max_runs)  # fmt: skip
    while True:
        job = run.took(await driver.run(run.turn(), conn))
        if job is not None:
            run.ran(job, await run_call(run.call(job)))
            continue
        if not run.idle:  # its outcome's retry, due now, was not visible to its claim
            continue
        # With `with_scheduled`, the jobs due later, then those they enqueue.
        if not run.with_scheduled or not await driver.run(run.promote(), conn):
            return run.drained


async def arun_job(target: Callable[..., Any], job: Job) -> Any:
    """Run a handler (or a task: ``@queue.task``) on ``job`` in its own
    `pgqueue.job_context()`, with no database and no queue; return what it
    returns, raise what it raises. ``job``: `build_job`, or
    `pgqueue.testing.task_job` for a task's."""
    return returned(await run_call(handler_call(target, job)))
