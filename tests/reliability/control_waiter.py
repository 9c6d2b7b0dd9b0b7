"""Scenario 21's waiter: ``q.wait(id)`` in a process of its own, printing what it returned.

    python -m tests.reliability.control_waiter JOB_ID TIMEOUT

``PGQUEUE_DSN`` and ``PGQUEUE_TABLE`` name the queue; ``REL_BACKEND`` says
how to wait: ``sync`` (`pgqueue.Queue.wait`), ``asyncio`` or ``trio``
(`pgqueue.AsyncQueue.wait` on that loop). One line of JSON on stdout:
``{"value": ...}`` (what the handler returned), or ``{"error": NAME,
"message": ...}`` if the wait raised; the exit status is 0 either way, so
that the test reads what happened rather than a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio

import pgqueue


def wait_sync(dsn: str, table: str, job_id: int, timeout: float) -> Any:
    with pgqueue.Queue(dsn, table=table) as q:
        return q.wait(job_id, timeout=timeout)


async def wait_async(dsn: str, table: str, job_id: int, seconds: float) -> Any:
    async with pgqueue.AsyncQueue(dsn, table=table) as q:
        return await q.wait(job_id, timeout=seconds)


def main() -> None:
    job_id, timeout = int(sys.argv[1]), float(sys.argv[2])
    dsn, table = os.environ["PGQUEUE_DSN"], os.environ["PGQUEUE_TABLE"]
    backend = os.environ.get("REL_BACKEND", "sync")
    try:
        if backend == "sync":
            value = wait_sync(dsn, table, job_id, timeout)
        else:
            value = anyio.run(wait_async, dsn, table, job_id, timeout, backend=backend)
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
    else:
        print(json.dumps({"value": value}), flush=True)


if __name__ == "__main__":
    main()
