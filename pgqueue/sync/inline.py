"""How a testing helper calls a handler in the calling thread (`pgqueue.sync.testing`).

A plain handler is called here; an ``async def`` one (a queue's async
task) on an event loop of its own, as the sync `Worker` runs it.
`pgqueue.aio.inline` is the async side.
"""

from __future__ import annotations

import anyio

from ..core.draining import HandlerCall, Ran

__all__ = ["run_call"]


def run_call(call: HandlerCall) -> Ran:
    """Run one handler call in its job's context; how it ended."""
    if call.is_async:
        return anyio.run(call.arun)
    return call.run()
