"""pgqueue in a Flask app: an order and its receipt job commit in one transaction.

    pip install 'pgqueue-jobs[flask]'
    export PGQUEUE_DSN=$(pgqueue embedded start)   # or your server's DSN
    python examples/flask_app.py --init-db                        # the tables (idempotent)
    flask --app examples/flask_app.py run                         # the web app
    flask --app examples/flask_app.py pgqueue worker              # its worker, in another shell

    curl -X POST localhost:5000/orders -H 'content-type: application/json' \\
         -d '{"item": "teapot", "email": "ann@example.com"}'

The app uses pgqueue's Flask extension (`pgqueue.contrib.flask`).
``POST /orders`` inserts the order in ``pgq.transaction()`` and enqueues its
``send_receipt`` job with ``pgq.enqueue``, which joins that transaction.
When the payment is declined the view raises inside it, and neither the
order nor the job exists. ``python examples/flask_app.py --demo`` sends a
few such requests with Flask's test client and prints what they left behind.

The handler is registered on the extension, so ``flask pgqueue worker``
runs it, in the app's context; ``examples/flask_worker.py`` offers the same
worker to ``pgqueue worker``. ``PGQUEUE_TABLE`` names the job table (default
``flask_jobs``); the app's own tables are ``<table>_orders`` and
``<table>_receipts``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import psycopg
from flask import Flask, request
from psycopg import sql

import pgqueue
from pgqueue.contrib.flask import PgQueue
from pgqueue.embedded import local_dsn

# Unset, the local server that `pgqueue embedded start` keeps (started if need be).
DSN = os.environ.get("PGQUEUE_DSN") or local_dsn()
TABLE = os.environ.get("PGQUEUE_TABLE", "flask_jobs")
ORDERS = sql.Identifier(f"{TABLE}_orders")
RECEIPTS = sql.Identifier(f"{TABLE}_receipts")

SCHEMA = [
    sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, item text NOT NULL,"
        " email text NOT NULL)"
    ).format(ORDERS),
    # The worker's record of receipts sent: its handler is idempotent through it.
    sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (order_id bigint PRIMARY KEY,"
        " sent_at timestamptz NOT NULL DEFAULT now())"
    ).format(RECEIPTS),
]
INSERT_ORDER = sql.SQL("INSERT INTO {} (item, email) VALUES (%s, %s) RETURNING id").format(ORDERS)
CLAIM_RECEIPT = sql.SQL(
    "INSERT INTO {} (order_id) VALUES (%s) ON CONFLICT (order_id) DO NOTHING RETURNING order_id"
).format(RECEIPTS)
ORDER_EMAIL = sql.SQL("SELECT email, item FROM {} WHERE id = %s").format(ORDERS)

# One extension for every app the factory makes: its pool and queue are per app.
pgq = PgQueue()


class PaymentDeclined(Exception):
    pass


def charge(order: dict[str, Any]) -> None:
    """Stands in for a payment service."""
    if order.get("card") == "declined":
        raise PaymentDeclined("payment declined")


def send_mail(to: str, subject: str) -> None:
    """Stands in for a mail service."""
    print(f"mail to {to}: {subject}", flush=True)


def create_app(dsn: str = DSN) -> Flask:
    """The app: its views and the queue share one connection pool (the extension's)."""
    app = Flask(__name__)
    app.config.update(PGQUEUE_DSN=dsn, PGQUEUE_TABLE=TABLE, PGQUEUE_WORKER={"concurrency": 4})
    pgq.init_app(app)

    @app.post("/orders")
    def create_order() -> tuple[dict[str, Any], int]:
        order = request.get_json(silent=True) or {}
        if not order.get("item") or not order.get("email"):
            return {"error": "item and email are required"}, 400
        with pgq.transaction() as conn:
            row = conn.execute(INSERT_ORDER, (order["item"], order["email"])).fetchone()
            assert row is not None
            order_id = row[0]
            # Inside pgq.transaction(): the job commits with the order.
            job_id = pgq.enqueue("send_receipt", {"order_id": order_id})
            charge(order)  # raises PaymentDeclined: the order and its job roll back together
        return {"order_id": order_id, "job_id": job_id}, 201

    @app.errorhandler(PaymentDeclined)
    def payment_declined(exc: PaymentDeclined) -> tuple[dict[str, Any], int]:
        return {"error": str(exc)}, 402

    return app


@pgq.handler("send_receipt")
def send_receipt(job: pgqueue.Job) -> None:
    """Send an order's receipt once, however many times the job runs.

    Delivery is at-least-once. The receipt is recorded in the same
    transaction as the sending: a repeated job finds the record and sends
    nothing; if the mail service raises, the record rolls back and the job
    is retried. (The one window left: the mail goes out and the process dies
    before the commit. A mail service that takes an idempotency key, such
    as the order id, closes it.) The worker runs it in the app's context,
    so ``pgq.transaction()`` borrows from the app's pool.
    """
    order_id = job.payload["order_id"]
    with pgq.transaction() as conn:
        if conn.execute(CLAIM_RECEIPT, (order_id,)).fetchone() is None:
            print(f"order {order_id}: receipt already sent, nothing to do", flush=True)
            return
        row = conn.execute(ORDER_EMAIL, (order_id,)).fetchone()
        if row is None:
            raise LookupError(f"order {order_id} does not exist")
        email, item = row
        send_mail(email, f"your receipt for order {order_id} ({item})")


def init_db(dsn: str = DSN) -> None:
    """The app's migrations: its tables and the job table (``flask pgqueue migrate``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement)
    with pgqueue.Queue(dsn, table=TABLE) as queue:
        queue.install()


def demo(dsn: str) -> None:
    """Send a few orders through the app with Flask's test client; print what is left."""
    init_db(dsn)
    app = create_app(dsn)
    client = app.test_client()
    orders = [
        {"item": "teapot", "email": "ann@example.com"},
        {"item": "kettle", "email": "bob@example.com", "card": "declined"},
        {"item": "cosy", "email": "cy@example.com"},
    ]
    for order in orders:
        response = client.post("/orders", json=order)
        print(f"POST /orders {order['item']}: {response.status_code} {response.get_json()}")
    with psycopg.connect(dsn) as conn:
        items = [
            r[0] for r in conn.execute(sql.SQL("SELECT item FROM {} ORDER BY id").format(ORDERS))
        ]
    with app.app_context():
        stats = pgq.queue.stats()
        pgq.close()
    waiting = stats.by_kind.get("send_receipt", {}).get(pgqueue.JobStatus.PENDING, 0)
    print(f"orders committed: {items}; send_receipt jobs waiting: {waiting}")
    print("run the worker: flask --app examples/flask_app.py pgqueue worker --until-empty")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init-db", action="store_true", help="create the tables and exit")
    parser.add_argument("--demo", action="store_true", help="send a few orders and exit")
    args = parser.parse_args()
    if args.demo:
        demo(DSN)
    elif args.init_db:
        init_db(DSN)
    else:
        init_db(DSN)
        create_app(DSN).run()
