"""The async driver seam: how `AsyncQueue` reaches PostgreSQL on each event loop.

* On asyncio, psycopg's own `AsyncConnectionPool` (`NativeDriver`).
* On trio (and on asyncio when the caller hands over a sync pool), psycopg's
  sync pool driven from worker threads with `anyio.to_thread.run_sync`
  (`ThreadDriver`). psycopg's async connections wait with asyncio's
  primitives and do not run under trio; worker threads need no patching.

Either way the driver runs the core's plans unchanged: the only code here
is "perform a step, await the result".
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from contextlib import AsyncExitStack, suppress
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed

from ..connection import blocking, settings
from ..core.jobs import wrong_connection
from ..core.ops import Copy, Operation, Rows, Step, needs_transaction
from ..core.pooling import GENERIC_PLANS, check_pool_kwargs, configures, pool_kwargs

__all__ = ["CallerConnection", "Driver", "PoolTarget", "make_driver"]

T = TypeVar("T")
CallerConnection = psycopg.AsyncConnection[Any] | psycopg.Connection[Any]
"""What `conn=` accepts on the async API: a psycopg `AsyncConnection` on
asyncio; on any event loop a sync `psycopg.Connection`, used from a worker thread."""

PoolTarget = str | AsyncConnectionPool | ConnectionPool
"""What `AsyncQueue` connects with: a DSN, or a pool the caller manages."""


def on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def perform(conn: psycopg.AsyncConnection[Any], step: Step) -> Rows:
    async with conn.cursor() as cur:
        if isinstance(step, Copy):
            async with cur.copy(step.query) as copy:
                await copy.write(step.data)
            return []
        await cur.execute(step.query, step.params)
        return await cur.fetchall() if cur.description is not None else []


async def run_on(conn: CallerConnection, op: Operation[T]) -> T:
    if isinstance(conn, psycopg.Connection):
        return await anyio.to_thread.run_sync(blocking.run_on, conn, op)
    if not isinstance(conn, psycopg.AsyncConnection):
        raise wrong_connection(conn, "a psycopg.AsyncConnection (asyncio) or a psycopg.Connection")
    if not on_asyncio():
        raise TypeError(
            "a psycopg.AsyncConnection only works on asyncio; pass a psycopg.Connection"
        )
    async with AsyncExitStack() as stack:
        idle = conn.info.transaction_status == TransactionStatus.IDLE
        if needs_transaction(op, autocommit=conn.autocommit, idle=idle):
            await stack.enter_async_context(conn.transaction())
        plan = op.plan
        try:
            step = next(plan)
            while True:
                step = plan.send(await perform(conn, step))
        except StopIteration as done:
            result: T = done.value
            return result
    raise AssertionError("unreachable")  # pragma: no cover


class Impl(Protocol):
    def owned_pool(self) -> AsyncConnectionPool | ConnectionPool | None: ...
    async def open(self) -> None: ...
    async def ready(self) -> None: ...
    async def run(self, op: Operation[T], conn: CallerConnection | None) -> T: ...
    async def close(self) -> None: ...


class NativeDriver:
    """psycopg's async pool; asyncio only."""

    def __init__(self, pool: AsyncConnectionPool, *, owned: bool) -> None:
        self.pool = pool
        self.owned = owned

    def owned_pool(self) -> AsyncConnectionPool | None:
        return self.pool if self.owned and self.pool.closed else None

    async def open(self) -> None:
        if not on_asyncio():
            raise RuntimeError(
                "a psycopg_pool.AsyncConnectionPool only works on asyncio; on trio give "
                "AsyncQueue a DSN or a psycopg_pool.ConnectionPool"
            )
        if self.owned:
            await self.pool.open(wait=False)

    async def ready(self) -> None:
        async with self.pool.connection():
            pass

    async def run(self, op: Operation[T], conn: CallerConnection | None) -> T:
        if conn is not None:
            return await run_on(conn, op)
        async with self.pool.connection() as pooled:
            return await run_on(pooled, op)

    async def close(self) -> None:
        if self.owned:
            await self.pool.close()


class ThreadDriver:
    """psycopg's sync pool from worker threads; any anyio backend."""

    def __init__(self, sync: blocking.Driver) -> None:
        self.sync = sync

    def owned_pool(self) -> ConnectionPool | None:
        return self.sync.pool if self.sync.owned and self.sync.pool.closed else None

    async def open(self) -> None:
        await anyio.to_thread.run_sync(self.sync.open)

    async def ready(self) -> None:
        await anyio.to_thread.run_sync(functools.partial(self.sync.open, wait=True))

    async def run(self, op: Operation[T], conn: CallerConnection | None) -> T:
        if conn is not None:
            return await run_on(conn, op)
        # Abandoned on cancel, as psycopg's async connections give up on a
        # cancelled query: a deadline (the worker's call_timeout) must bound a
        # call whose connection went silent. The thread ends when its socket
        # fails (TCP keepalives) and its connection is discarded by the pool.
        return await anyio.to_thread.run_sync(self.sync.run, op, abandon_on_cancel=True)

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self.sync.close)


class Driver:
    """Chooses its implementation when first used, from the running event loop."""

    def __init__(self, target: PoolTarget, *, max_size: int, transaction_pooling: bool) -> None:
        if not isinstance(target, (str, AsyncConnectionPool, ConnectionPool)):
            raise TypeError(
                "expected a DSN str, a psycopg_pool.AsyncConnectionPool or a "
                f"psycopg_pool.ConnectionPool, not {type(target).__name__}"
            )
        if not isinstance(target, str):
            check_pool_kwargs(target.kwargs, transaction_pooling=transaction_pooling)
        self._target = target
        self._max_size = max_size
        self._transaction_pooling = transaction_pooling
        # No primitive of an event loop here: a queue may be made on one loop
        # (or none) and used on another (a sync `Queue` made inside a trio
        # program, served by a `Worker` on its own loop). The choice is made
        # once under a thread lock that is never held across an await; every
        # implementation's `open` may be called again, from any loop.
        self._choice = threading.Lock()
        self._chosen: Impl | None = None  # under `_choice`; perhaps not open yet
        self._impl: Impl | None = None  # open

    @property
    def conninfo(self) -> str:
        target = self._target
        return target if isinstance(target, str) else settings.pool_conninfo(target)

    async def connection_settings(self) -> tuple[str, dict[str, Any]]:
        """The conninfo and keyword arguments the queue's pool connects with
        (for a connection beside it: a worker's LISTEN)."""
        target = self._target
        if isinstance(target, str):
            return target, settings.connection_kwargs(target)
        if isinstance(target, AsyncConnectionPool):
            conninfo: Any = target.conninfo
            kwargs: Any = target.kwargs
            if callable(conninfo):
                conninfo = conninfo()
                if inspect.isawaitable(conninfo):
                    conninfo = await conninfo
            if callable(kwargs):
                kwargs = kwargs()
                if inspect.isawaitable(kwargs):
                    kwargs = await kwargs
            return str(conninfo), dict(kwargs or {})
        return settings.resolve_settings(target)

    def _choose(self) -> Impl:
        target = self._target
        if isinstance(target, AsyncConnectionPool):
            return NativeDriver(target, owned=False)
        if isinstance(target, ConnectionPool):
            return ThreadDriver(blocking.Driver(target, owned=False))
        if on_asyncio():
            kwargs = pool_kwargs(
                settings.connection_kwargs(target), transaction_pooling=self._transaction_pooling
            )
            pool = AsyncConnectionPool(
                target,
                min_size=1,
                max_size=self._max_size,
                kwargs=kwargs,
                configure=generic_plans
                if configures(transaction_pooling=self._transaction_pooling)
                else None,
                open=False,
                name="pgqueue",
                reconnect_timeout=settings.RECONNECT_TIMEOUT,
                reconnect_failed=reconnect_now,
            )
            return NativeDriver(pool, owned=True)
        sync = blocking.make_driver(
            target, max_size=self._max_size, transaction_pooling=self._transaction_pooling
        )
        return ThreadDriver(sync)

    async def open(self, *, wait: bool = False, probe: bool | None = None) -> Impl:
        """As `pgqueue.connection.blocking.Driver.open`: ``probe`` (default ``wait``)
        connects once before the queue's own pool is first opened."""
        impl = self._impl
        if impl is None:
            with self._choice:
                if self._chosen is None:
                    self._chosen = self._choose()
                impl = self._chosen
            owned = impl.owned_pool()
            if owned is not None and (wait if probe is None else probe):
                await anyio.to_thread.run_sync(blocking.probe_server, owned)
            await impl.open()
            self._impl = impl
        if wait:
            await impl.ready()
        return impl

    async def run(self, op: Operation[T], conn: CallerConnection | None = None) -> T:
        # The API's first call probes: the server's reason, at once.
        impl = self._impl if self._impl is not None else await self.open(probe=True)
        return await impl.run(op, conn)

    async def close(self) -> None:
        with self._choice:
            impl, self._chosen, self._impl = self._chosen, None, None
        if impl is not None:
            await impl.close()


async def generic_plans(conn: psycopg.AsyncConnection[Any]) -> None:
    """(A queue's own pool, on each new connection.) See `GENERIC_PLANS`."""
    await conn.execute(GENERIC_PLANS)


async def reconnect_now(pool: AsyncConnectionPool) -> None:
    """`pgqueue.connection.blocking.reconnect_now`, for psycopg's async pool."""
    if not pool.closed:
        with suppress(PoolClosed):
            await pool.check()


def make_driver(target: PoolTarget, *, max_size: int, transaction_pooling: bool = False) -> Driver:
    return Driver(target, max_size=max_size, transaction_pooling=transaction_pooling)
