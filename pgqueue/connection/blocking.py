"""The blocking driver: run core plans on psycopg connections from a pool.

`pgqueue.Queue` runs its operations with it; `pgqueue.AsyncQueue` on trio
runs these same functions in worker threads (`pgqueue.aio.driver`), as do
the dashboard and the blocking wait.
"""

from __future__ import annotations

import threading
from contextlib import suppress
from functools import partial
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed

from ..core.jobs import wrong_connection
from ..core.ops import Copy, Operation, Rows, Step, drive, needs_transaction
from ..core.pooling import GENERIC_PLANS, check_pool_kwargs, configures, pool_kwargs
from .settings import RECONNECT_TIMEOUT, connection_kwargs, pool_conninfo, resolve_settings

__all__ = [
    "CallerConnection",
    "Driver",
    "PoolTarget",
    "make_driver",
    "make_pool",
    "perform",
    "probe_server",
    "reconnect_now",
    "run_on",
]

T = TypeVar("T")
CallerConnection = psycopg.Connection[Any]
"""What `conn=` accepts on the sync API."""
PoolTarget = str | ConnectionPool
"""What `Queue` connects with: a DSN, or a pool the caller manages."""


def perform(conn: psycopg.Connection[Any], step: Step) -> Rows:
    """Carry out one step of a plan on `conn`."""
    with conn.cursor() as cur:
        if isinstance(step, Copy):
            with cur.copy(step.query) as copy:
                copy.write(step.data)
            return []
        cur.execute(step.query, step.params)
        return cur.fetchall() if cur.description is not None else []


def run_on(conn: psycopg.Connection[Any], op: Operation[T]) -> T:
    """Run `op` on `conn`; a multi-step plan runs in a transaction (or savepoint)."""
    if not isinstance(conn, psycopg.Connection):
        raise wrong_connection(conn, "a psycopg.Connection")
    idle = conn.info.transaction_status == TransactionStatus.IDLE
    if needs_transaction(op, autocommit=conn.autocommit, idle=idle):
        with conn.transaction():
            return drive(op.plan, partial(perform, conn))
    return drive(op.plan, partial(perform, conn))


def reconnect_now(pool: ConnectionPool) -> None:
    """(The pool's ``reconnect_failed``, in one of its threads.) Try again now."""
    if not pool.closed:
        with suppress(PoolClosed):
            pool.check()


def generic_plans(conn: psycopg.Connection[Any]) -> None:
    """(A queue's own pool, on each new connection.) See `GENERIC_PLANS`."""
    conn.execute(GENERIC_PLANS)


def make_pool(conninfo: str, *, max_size: int, transaction_pooling: bool = False) -> ConnectionPool:
    """The pool a queue opens for itself from a DSN."""
    return ConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        # One statement is one transaction: a claim or a batch completion
        # costs one round trip. Multi-step plans open their own transaction.
        kwargs=pool_kwargs(connection_kwargs(conninfo), transaction_pooling=transaction_pooling),
        configure=generic_plans if configures(transaction_pooling=transaction_pooling) else None,
        open=False,
        name="pgqueue",
        reconnect_timeout=RECONNECT_TIMEOUT,
        reconnect_failed=reconnect_now,
    )


def probe_server(pool: ConnectionPool | AsyncConnectionPool) -> None:
    """Connect once as ``pool`` would, and close: `psycopg.OperationalError`
    with the server's (or the network's) reason if that fails, within the
    DSN's ``connect_timeout``, else the pool's timeout."""
    conninfo, kwargs = resolve_settings(pool)
    if "connect_timeout" not in {**conninfo_to_dict(conninfo), **kwargs}:
        # libpq's unit is whole seconds; below 2 it means 2.
        kwargs["connect_timeout"] = max(2, round(pool.timeout))
    with psycopg.connect(conninfo, **kwargs):
        pass


class Driver:
    """Runs operations on the caller's connection or on one from the pool."""

    def __init__(self, pool: ConnectionPool, *, owned: bool) -> None:
        self.pool = pool
        self.owned = owned
        self._open_lock = threading.Lock()
        self._opened = not owned

    @property
    def conninfo(self) -> str:
        return pool_conninfo(self.pool)

    def connection_settings(self) -> tuple[str, dict[str, Any]]:
        """The conninfo and keyword arguments the pool connects with."""
        return resolve_settings(self.pool)

    def open(self, *, wait: bool = False, probe: bool | None = None) -> None:
        """Open the pool if it is the driver's; with ``wait``, wait until it has
        a connection (`PoolTimeout` after the pool's timeout: psycopg_pool's
        own wait would close it).

        ``probe`` (default: ``wait``): before the driver's own pool is first
        opened, connect once (`probe_server`), so that a server that cannot
        be reached raises its own reason (`psycopg.OperationalError`) within
        the connect timeout, and no pool is left retrying. A worker opens
        without it: through an outage, its pool's own retries are faster.
        """
        with self._open_lock:
            if not self._opened:
                if self.owned and (wait if probe is None else probe):
                    probe_server(self.pool)
                self.pool.open(wait=False)
                self._opened = True
        if wait:
            with self.pool.connection():
                pass

    def run(self, op: Operation[T], conn: CallerConnection | None = None) -> T:
        if conn is not None:
            return run_on(conn, op)
        if not self._opened:
            self.open(probe=True)  # the API's first call: the server's reason, at once
        with self.pool.connection() as pooled:
            return run_on(pooled, op)

    def close(self) -> None:
        if self.owned:
            self.pool.close()


def make_driver(target: PoolTarget, *, max_size: int, transaction_pooling: bool = False) -> Driver:
    if isinstance(target, ConnectionPool):
        check_pool_kwargs(target.kwargs, transaction_pooling=transaction_pooling)
        return Driver(target, owned=False)
    if isinstance(target, str):
        pool = make_pool(target, max_size=max_size, transaction_pooling=transaction_pooling)
        return Driver(pool, owned=True)
    raise TypeError(
        f"expected a DSN str or a psycopg_pool.ConnectionPool, not {type(target).__name__}"
    )
