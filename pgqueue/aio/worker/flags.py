"""The two wake-up primitives the worker's components use; nothing else re-arms an event.

`anyio.Event` cannot be cleared. `Wakeup` (one waiter; a set that nobody
waited for yet is kept, and consumed by the next wait) and `Broadcast`
(every current waiter; nothing kept) make a new one where needed, so that
no component keeps an event of its own and re-arms it by assignment.
`call_soon` is how a thread sets one: without waiting for the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress

import anyio
import anyio.lowlevel

__all__ = ["Broadcast", "Wakeup", "call_soon"]


def call_soon(token: anyio.lowlevel.EventLoopToken, func: Callable[[], object]) -> None:
    """(From a thread.) Have the event loop of ``token`` run ``func`` soon,
    in the order of the calls, as anyio code (``anyio.current_time()`` and
    the like work in it), and never wait for it: an event loop that ends
    meanwhile never runs it, and a thread that waited for it (as
    `anyio.from_thread.run_sync` does) would wait forever."""
    with suppress(RuntimeError):  # the loop is closed (anyio.RunFinishedError is one)
        token.backend_class.run_sync_soon(func, (), token.native_token)


class Wakeup:
    """A flag one task waits on: `set` wakes it, or its next `wait` returns at once."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._set = False  # mirrors the event: a set per job costs one test

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._event.set()

    def clear(self) -> None:
        """Forget a `set` not waited for yet (before looking, so that no later set is lost)."""
        if self._set:
            self._set = False
            self._event = anyio.Event()

    async def wait(self) -> None:
        """Return once set, and consume the set."""
        await self._event.wait()
        self.clear()

    async def wait_for(self, seconds: float) -> bool:
        """`wait`, for at most ``seconds``; True if it was set."""
        with anyio.move_on_after(seconds):
            await self.wait()
            return True
        return False


class Broadcast:
    """Wakes every task waiting at the time of `notify`; a task checks its
    condition, then waits (with no checkpoint between), then checks again."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._waiting = 0  # notify() costs nothing while nobody waits

    def notify(self) -> None:
        if self._waiting:
            self._event.set()
            self._event = anyio.Event()

    async def wait(self) -> None:
        self._waiting += 1
        try:
            await self._event.wait()
        finally:
            self._waiting -= 1
