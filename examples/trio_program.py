"""pgqueue in a trio program: an AsyncWorker beside the code that enqueues.

    python examples/trio_program.py           # serve until Ctrl-C or SIGTERM
    python examples/trio_program.py --demo    # enqueue a batch, drain it, print a summary

The same program as examples/asyncio_service.py, on trio. The worker is the
same `pgqueue.AsyncWorker`; what differs is the database connection passed
as ``conn=``: psycopg's async connections run on asyncio only, so on trio the
orders and their jobs are written on a sync ``psycopg.Connection``, which
pgqueue (and this program) use from worker threads.

With ``PGQUEUE_DSN`` set it uses that server; otherwise it starts a throwaway
embedded PostgreSQL. ``PGQUEUE_TABLE`` names the job table (default
``trio_jobs``); the orders table is ``<table>_orders``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import trio
from psycopg import sql

import pgqueue

TABLE = os.environ.get("PGQUEUE_TABLE", "trio_jobs")
ORDERS = sql.Identifier(f"{TABLE}_orders")
CREATE_ORDERS = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, item text NOT NULL)"
).format(ORDERS)
INSERT_ORDERS = sql.SQL("INSERT INTO {} (item) SELECT unnest(%s::text[]) RETURNING id").format(
    ORDERS
)

handled: Counter[str] = Counter()
handled_lock = threading.Lock()  # render_invoice counts from worker threads


async def send_receipt(job: pgqueue.Job) -> None:
    """An ``async def`` handler runs on the event loop: for I/O."""
    await trio.sleep(0.01)  # stands in for a call to a mail service
    with handled_lock:
        handled[job.kind] += 1


def render_invoice(job: pgqueue.Job) -> None:
    """A plain function runs in a worker thread: for blocking or CPU-bound work."""
    hashlib.sha256(json.dumps(job.payload).encode() * 1000).hexdigest()
    with handled_lock:
        handled[job.kind] += 1


def make_worker(queue: pgqueue.AsyncQueue) -> pgqueue.AsyncWorker:
    handlers = {"send_receipt": send_receipt, "render_invoice": render_invoice}
    return pgqueue.AsyncWorker(queue, handlers, concurrency=8, batch_size=50)


async def place_orders(dsn: str, queue: pgqueue.AsyncQueue, items: list[str]) -> list[int]:
    """Insert orders and enqueue their jobs in one transaction: all of it commits, or none."""
    conn: psycopg.Connection[Any] = await trio.to_thread.run_sync(lambda: psycopg.connect(dsn))
    try:
        cur = await trio.to_thread.run_sync(conn.execute, INSERT_ORDERS, (items,))
        order_ids = [row[0] for row in cur.fetchall()]
        jobs = [(kind, {"order_id": i}) for i in order_ids
                for kind in ("send_receipt", "render_invoice")]  # fmt: skip
        await queue.enqueue_many(jobs, conn=conn)  # pgqueue uses conn from a worker thread
        await trio.to_thread.run_sync(conn.commit)
    finally:
        await trio.to_thread.run_sync(conn.close)  # without the commit: rolled back
    return order_ids


async def produce(dsn: str, queue: pgqueue.AsyncQueue, interval: float) -> None:
    n = 0
    while True:
        n += 1
        [order_id] = await place_orders(dsn, queue, [f"order {n}"])
        print(f"placed order {order_id}", flush=True)
        await trio.sleep(interval)


async def serve(dsn: str, interval: float) -> None:
    async with pgqueue.AsyncQueue(dsn, table=TABLE) as queue:
        await setup(dsn, queue)
        worker = make_worker(queue)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce, dsn, queue, interval)
            await worker.run()  # until SIGINT or SIGTERM (or worker.stop())
            nursery.cancel_scope.cancel()  # and the producer with it
        print(f"stopped; handled {dict(sorted(handled.items()))}", flush=True)


async def demo(dsn: str, orders: int) -> None:
    async with pgqueue.AsyncQueue(dsn, table=TABLE) as queue:
        await setup(dsn, queue)
        await place_orders(dsn, queue, [f"item {n}" for n in range(orders)])
        print(f"enqueued {orders} orders' jobs: {2 * orders} jobs")
        started = time.perf_counter()
        await make_worker(queue).run(until_empty=True)
        elapsed = time.perf_counter() - started
        total = sum(handled.values())
        print(f"handled {total} jobs in {elapsed:.2f} s ({total / elapsed:,.0f} jobs/s): "
              f"{dict(sorted(handled.items()))}")  # fmt: skip
        counts = {str(status): n for status, n in (await queue.stats()).by_status.items()}
        print(f"left in {TABLE}: {counts}")


async def setup(dsn: str, queue: pgqueue.AsyncQueue) -> None:
    await queue.install()

    def create_orders() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(CREATE_ORDERS)

    await trio.to_thread.run_sync(create_orders)


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="drain one batch and exit")
    parser.add_argument("--orders", type=int, default=200, help="orders for --demo")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between orders")
    args = parser.parse_args(argv)
    if not args.demo:  # the worker says when it starts and stops, and why
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    with database() as dsn:
        if args.demo:
            trio.run(demo, dsn, args.orders)
        else:
            trio.run(serve, dsn, args.interval)


if __name__ == "__main__":
    main()
