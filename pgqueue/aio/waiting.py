"""`AsyncQueue.wait`: the blocking wait of `pgqueue.connection.waiting`, in a thread.

One implementation serves asyncio and trio (psycopg's async connections
are asyncio's only); a cancelled wait tells its thread to stop, and the
thread closes its connection at its next look.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from ..connection.waiting import wait_blocking
from ..core.jobs import Job

if TYPE_CHECKING:
    from .queue import AsyncQueue

__all__ = ["wait_for_result"]


async def wait_for_result(queue: AsyncQueue, job_id: Job | int, timeout: float) -> Any:  # noqa: ASYNC109
    """`AsyncQueue.wait`."""
    conninfo, kwargs = await queue.connection_settings()
    stop = threading.Event()
    call = partial(wait_blocking, queue.core, conninfo, kwargs, job_id, timeout, stop)
    try:
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    finally:
        stop.set()
