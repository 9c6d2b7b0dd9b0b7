"""pgqueue quick start, async API: an order and its job commit together.

    python examples/quickstart_async.py          # asyncio
    python examples/quickstart_async.py --trio   # trio

With ``PGQUEUE_DSN`` set it uses that server; otherwise it starts a throwaway
embedded PostgreSQL. ``PGQUEUE_TABLE`` names the job table (default
``quickstart_jobs``); the orders table is called ``<table>_orders``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import anyio.to_thread
import psycopg
from psycopg import sql

import pgqueue

TABLE = os.environ.get("PGQUEUE_TABLE", "quickstart_jobs")
ORDERS = sql.Identifier(f"{TABLE}_orders")
CREATE_ORDERS = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, item text NOT NULL)"
).format(ORDERS)
INSERT_ORDERS = sql.SQL("INSERT INTO {} (item) SELECT unnest(%s::text[]) RETURNING id").format(
    ORDERS
)
BATCH = 2_000
WORKERS = 4

Conn = psycopg.AsyncConnection[Any] | psycopg.Connection[Any]
receipts: list[int] = []  # stands in for a mail service


async def send_receipt(job: pgqueue.Job) -> None:
    # Delivery is at-least-once: a real handler would give the mail service
    # an idempotency key (the order id) so that a repeated job sends nothing.
    receipts.append(job.payload["order_id"])


HANDLERS = {"send_receipt": send_receipt}


async def drain(q: pgqueue.AsyncQueue, worker: str) -> int:
    """Claim, run and complete jobs until none is ready; return how many succeeded."""
    succeeded = 0
    while jobs := await q.claim(20, worker=worker):
        done = []
        for job in jobs:
            try:
                handler = HANDLERS.get(job.kind)
                if handler is None:
                    raise LookupError(f"no handler for kind {job.kind!r}")
                await handler(job)
            except Exception as exc:
                status = await q.fail(job, exc)  # pending again (with backoff) or dead
                print(f"job {job.id} ({job.kind}) failed: {exc}; it is now {status}")
            else:
                done.append(job)
        succeeded += await q.complete(*done)  # one statement for the whole batch
    return succeeded


async def drain_concurrently(q: pgqueue.AsyncQueue) -> int:
    """Run WORKERS drain loops at once; SKIP LOCKED keeps them off each other's jobs."""
    counts: list[int] = []

    async def one(n: int) -> None:
        counts.append(await drain(q, f"quickstart-{n}"))

    async with anyio.create_task_group() as tg:
        for n in range(WORKERS):
            tg.start_soon(one, n)
    return sum(counts)


@asynccontextmanager
async def transaction(dsn: str, *, trio: bool) -> AsyncIterator[Conn]:
    """A connection that ``conn=`` accepts on this event loop, in a transaction.

    Commits at the end of the block; an exception rolls it back.
    """
    if not trio:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            yield aconn
        return
    # psycopg's async connections run on asyncio only. On trio, conn= takes a
    # sync connection, which pgqueue uses from a worker thread.
    conn: psycopg.Connection[Any] = await anyio.to_thread.run_sync(lambda: psycopg.connect(dsn))
    try:
        yield conn
        await anyio.to_thread.run_sync(conn.commit)
    finally:
        await anyio.to_thread.run_sync(conn.close)  # uncommitted work is rolled back


async def execute(conn: Conn, query: sql.Composed, *params: Any) -> list[tuple[Any, ...]]:
    if isinstance(conn, psycopg.AsyncConnection):
        acur = await conn.execute(query, params or None)
        return await acur.fetchall() if acur.description else []
    cur = await anyio.to_thread.run_sync(lambda: conn.execute(query, params or None))
    return cur.fetchall() if cur.description else []


async def insert_orders(conn: Conn, items: list[str]) -> list[int]:
    return [row[0] for row in await execute(conn, INSERT_ORDERS, items)]


async def main(dsn: str, trio: bool) -> None:
    async with pgqueue.AsyncQueue(dsn, table=TABLE) as q:
        await q.install()
        async with transaction(dsn, trio=trio) as conn:
            await execute(conn, CREATE_ORDERS)

        # The order and its job commit together...
        async with transaction(dsn, trio=trio) as conn:
            [order_id] = await insert_orders(conn, ["teapot"])
            job_id = await q.enqueue("send_receipt", {"order_id": order_id}, conn=conn)
        print(f"order {order_id} committed with job {job_id}")

        # ...or neither exists.
        try:
            async with transaction(dsn, trio=trio) as conn:
                [lost_order] = await insert_orders(conn, ["kettle"])
                lost_job = await q.enqueue("send_receipt", {"order_id": lost_order}, conn=conn)
                raise RuntimeError("payment declined")
        except RuntimeError:
            exists = await q.get(lost_job) is not None
            print(f"order {lost_order} rolled back; job {lost_job} exists: {exists}")

        # A kind nobody handles: it fails, and with one attempt it is dead at once.
        await q.enqueue("print_label", {"order_id": order_id}, max_attempts=1)

        succeeded = await drain_concurrently(q)
        print(f"{succeeded} job(s) succeeded; receipts sent for orders {receipts}")

        # A batch: BATCH orders and their jobs in one transaction.
        started = time.perf_counter()
        async with transaction(dsn, trio=trio) as conn:
            order_ids = await insert_orders(conn, [f"item {n}" for n in range(BATCH)])
            await q.enqueue_many([("send_receipt", {"order_id": i}) for i in order_ids], conn=conn)
        enqueued = time.perf_counter()
        succeeded = await drain_concurrently(q)
        elapsed = time.perf_counter() - enqueued
        print(f"enqueued {BATCH:,} orders and jobs in {enqueued - started:.2f} s")
        print(
            f"drained {succeeded:,} jobs with {WORKERS} concurrent loops in {elapsed:.2f} s: "
            f"{succeeded / elapsed:,.0f} jobs/s"
        )

        counts = {str(status): n for status, n in (await q.stats()).by_status.items()}
        print(f"left in {TABLE}: {counts}")


@contextmanager
def database() -> Iterator[str]:
    """``PGQUEUE_DSN`` if it is set, otherwise a throwaway embedded PostgreSQL."""
    if dsn := os.environ.get("PGQUEUE_DSN"):
        yield dsn
        return
    from pgqueue.embedded import EmbeddedPostgres

    print("PGQUEUE_DSN is not set: starting an embedded PostgreSQL")
    with EmbeddedPostgres() as dsn:
        yield dsn


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trio", action="store_true", help="run on trio instead of asyncio")
    args = parser.parse_args()
    with database() as dsn:
        print(f"event loop: {'trio' if args.trio else 'asyncio'}")
        anyio.run(main, dsn, args.trio, backend="trio" if args.trio else "asyncio")
