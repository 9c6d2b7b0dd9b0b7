"""A queue's own connections keep the generic plan of each prepared statement
(`pgqueue.core.pooling.GENERIC_PLANS`), unless the DSN chose a
``plan_cache_mode`` or the queue goes through a transaction pooler; a pool
of the caller's is left as it is. That those plans read O(batch) is
tests/behaviour/test_claim_plans.py's ("generic").
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.to_thread
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool

import pgqueue
from pgqueue.aio.driver import NativeDriver, ThreadDriver

from ..backends import THROUGH_PGBOUNCER, SyncAsAsync, open_queue

pytestmark = pytest.mark.anyio


async def plan_cache_mode(q: Any) -> str:
    """``plan_cache_mode`` on a connection of the queue's own pool, after a call opened it."""
    await q.stats()
    if isinstance(q, SyncAsAsync):
        pool = q.sync._driver.pool
    else:
        impl = q._driver._chosen
        if isinstance(impl, NativeDriver):
            async with impl.pool.connection() as aconn:
                cur = await aconn.execute("SHOW plan_cache_mode")
                return str((await cur.fetchone() or ("",))[0])
        assert isinstance(impl, ThreadDriver)
        pool = impl.sync.pool
    assert isinstance(pool, ConnectionPool)

    def show() -> str:
        with pool.connection() as conn:
            return str((conn.execute("SHOW plan_cache_mode").fetchone() or ("",))[0])

    return await anyio.to_thread.run_sync(show)


async def test_a_queues_own_connections_keep_generic_plans(
    backend: str, dsn: str, table: str
) -> None:
    async with open_queue(backend, dsn, table=table) as q:
        await q.install()
        mode = await plan_cache_mode(q)
        await q.uninstall()
    # Through a transaction pooler nothing is prepared, and nothing is set
    # on a server session that another client gets next.
    assert mode == ("auto" if THROUGH_PGBOUNCER else "force_generic_plan")


async def test_a_plan_cache_mode_chosen_in_the_dsn_is_kept(
    backend: str, server_dsn: str, table: str
) -> None:
    # On the server itself: PgBouncer refuses the options startup parameter.
    chosen = make_conninfo(server_dsn, options="-c plan_cache_mode=force_custom_plan")
    async with open_queue(backend, chosen, table=table) as q:
        await q.install()
        mode = await plan_cache_mode(q)
        await q.uninstall()
    assert mode == "force_custom_plan"


def test_a_pool_of_the_callers_is_left_as_it_is(server_dsn: str, table: str) -> None:
    with ConnectionPool(server_dsn, kwargs={"autocommit": True}, open=True) as pool:
        q = pgqueue.Queue(pool, table=table)
        q.install()
        q.stats()
        with pool.connection() as conn:
            row = conn.execute("SHOW plan_cache_mode").fetchone()
        q.uninstall()
    assert row == ("auto",)
