"""How a testing helper calls a handler on an event loop (`pgqueue.aio.testing`).

As a worker does: an ``async def`` handler is awaited in the calling task,
a plain one runs in a worker thread. `pgqueue.sync.inline` is the sync side.
"""

from __future__ import annotations

import anyio.to_thread

from ..core.draining import HandlerCall, Ran

__all__ = ["run_call"]


async def run_call(call: HandlerCall) -> Ran:
    """Run one handler call in its job's context; how it ended."""
    if call.is_async:
        return await call.arun()
    return await anyio.to_thread.run_sync(call.run)
