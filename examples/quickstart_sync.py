"""pgqueue quick start, sync API: an order and its job commit together.

    pip install -e '.[embedded]'
    python examples/quickstart_sync.py

With ``PGQUEUE_DSN`` set it uses that server; otherwise it starts a throwaway
embedded PostgreSQL. ``PGQUEUE_TABLE`` names the job table (default
``quickstart_jobs``); the orders table is called ``<table>_orders``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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

receipts: list[int] = []  # stands in for a mail service


def send_receipt(job: pgqueue.Job) -> None:
    # Delivery is at-least-once: a real handler would give the mail service
    # an idempotency key (the order id) so that a repeated job sends nothing.
    receipts.append(job.payload["order_id"])


HANDLERS = {"send_receipt": send_receipt}


def drain(q: pgqueue.Queue) -> int:
    """Claim, run and complete jobs until none is ready; return how many succeeded."""
    succeeded = 0
    while jobs := q.claim(20, worker="quickstart"):
        done = []
        for job in jobs:
            try:
                handler = HANDLERS.get(job.kind)
                if handler is None:
                    raise LookupError(f"no handler for kind {job.kind!r}")
                handler(job)
            except Exception as exc:
                status = q.fail(job, exc)  # pending again (with backoff) or dead
                print(f"job {job.id} ({job.kind}) failed: {exc}; it is now {status}")
            else:
                done.append(job)
        succeeded += q.complete(*done)  # one statement for the whole batch
    return succeeded


def insert_orders(conn: psycopg.Connection[Any], items: list[str]) -> list[int]:
    return [row[0] for row in conn.execute(INSERT_ORDERS, (items,))]


def main(dsn: str) -> None:
    with pgqueue.Queue(dsn, table=TABLE) as q, psycopg.connect(dsn, autocommit=True) as conn:
        q.install()
        conn.execute(CREATE_ORDERS)

        # The order and its job commit together...
        with conn.transaction():
            [order_id] = insert_orders(conn, ["teapot"])
            job_id = q.enqueue("send_receipt", {"order_id": order_id}, conn=conn)
        print(f"order {order_id} committed with job {job_id}")

        # ...or neither exists.
        try:
            with conn.transaction():
                [lost_order] = insert_orders(conn, ["kettle"])
                lost_job = q.enqueue("send_receipt", {"order_id": lost_order}, conn=conn)
                raise RuntimeError("payment declined")
        except RuntimeError:
            exists = q.get(lost_job) is not None
            print(f"order {lost_order} rolled back; job {lost_job} exists: {exists}")

        # A kind nobody handles: it fails, and with one attempt it is dead at once.
        q.enqueue("print_label", {"order_id": order_id}, max_attempts=1)

        succeeded = drain(q)
        print(f"{succeeded} job(s) succeeded; receipts sent for orders {receipts}")

        # A batch: BATCH orders and their jobs in one transaction.
        started = time.perf_counter()
        with conn.transaction():
            order_ids = insert_orders(conn, [f"item {n}" for n in range(BATCH)])
            q.enqueue_many([("send_receipt", {"order_id": i}) for i in order_ids], conn=conn)
        enqueued = time.perf_counter()
        succeeded = drain(q)
        elapsed = time.perf_counter() - enqueued
        print(f"enqueued {BATCH:,} orders and jobs in {enqueued - started:.2f} s")
        print(f"drained {succeeded:,} jobs in {elapsed:.2f} s: {succeeded / elapsed:,.0f} jobs/s")

        counts = {str(status): n for status, n in q.stats().by_status.items()}
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
    with database() as dsn:
        main(dsn)
