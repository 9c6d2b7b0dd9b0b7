"""The worker of examples/flask_app.py: it sends the order receipts.

    pgqueue worker examples.flask_worker:worker                # until Ctrl-C or SIGTERM
    pgqueue worker examples.flask_worker:worker --until-empty  # drain, then exit
    python examples/flask_worker.py [--until-empty]            # the same, without the command

It needs the app's tables (``python examples/flask_app.py --init-db``) and
reads ``PGQUEUE_DSN`` and ``PGQUEUE_TABLE`` as the app does. It does not
import Flask: a worker process needs the handlers, not the web app.
"""

from __future__ import annotations

import argparse
import logging
import os

import psycopg
from psycopg import sql

import pgqueue

DSN = os.environ.get("PGQUEUE_DSN", "postgresql://localhost/shop")
TABLE = os.environ.get("PGQUEUE_TABLE", "flask_jobs")
ORDERS = sql.Identifier(f"{TABLE}_orders")
RECEIPTS = sql.Identifier(f"{TABLE}_receipts")

CLAIM_RECEIPT = sql.SQL(
    "INSERT INTO {} (order_id) VALUES (%s) ON CONFLICT (order_id) DO NOTHING RETURNING order_id"
).format(RECEIPTS)
ORDER_EMAIL = sql.SQL("SELECT email, item FROM {} WHERE id = %s").format(ORDERS)

queue = pgqueue.Queue(DSN, table=TABLE)
worker = pgqueue.Worker(queue, concurrency=4)


def send_mail(to: str, subject: str) -> None:
    """Stands in for a mail service."""
    print(f"mail to {to}: {subject}", flush=True)


@worker.handler("send_receipt")
def send_receipt(job: pgqueue.Job) -> None:
    """Send an order's receipt once, however many times the job runs.

    Delivery is at-least-once. The receipt is recorded in the same
    transaction as the sending: a repeated job finds the record and sends
    nothing; if the mail service raises, the record rolls back and the job
    is retried. (The one window left: the mail goes out and the process dies
    before the commit. A mail service that takes an idempotency key, such
    as the order id, closes it.)
    """
    order_id = job.payload["order_id"]
    with psycopg.connect(DSN) as conn, conn.transaction():
        if conn.execute(CLAIM_RECEIPT, (order_id,)).fetchone() is None:
            print(f"order {order_id}: receipt already sent, nothing to do", flush=True)
            return
        row = conn.execute(ORDER_EMAIL, (order_id,)).fetchone()
        if row is None:
            raise LookupError(f"order {order_id} does not exist")
        email, item = row
        send_mail(email, f"your receipt for order {order_id} ({item})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--until-empty", action="store_true", help="drain, then exit")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    with queue:
        worker.run(until_empty=args.until_empty)
