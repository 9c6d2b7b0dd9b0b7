"""pgqueue in a Flask app: an order and its receipt job commit in one transaction.

    pip install flask
    export PGQUEUE_DSN=postgresql://localhost/shop
    python examples/flask_app.py --init-db         # create the tables (idempotent)
    flask --app examples/flask_app.py run          # the web app
    pgqueue worker examples.flask_worker:worker    # its worker, in another shell

    curl -X POST localhost:5000/orders -H 'content-type: application/json' \\
         -d '{"item": "teapot", "email": "ann@example.com"}'

``POST /orders`` inserts the order and enqueues its ``send_receipt`` job on
the same connection, in the same transaction (``conn=``). When the payment
is declined the view raises inside the transaction, and neither the order
nor the job exists. ``python examples/flask_app.py --demo`` sends a few such
requests with Flask's test client and prints what they left behind.

``PGQUEUE_TABLE`` names the job table (default ``flask_jobs``); the app's own
tables are ``<table>_orders`` and ``<table>_receipts``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import psycopg
from flask import Flask, request
from psycopg import sql
from psycopg_pool import ConnectionPool

import pgqueue

DSN = os.environ.get("PGQUEUE_DSN", "postgresql://localhost/shop")
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


class PaymentDeclined(Exception):
    pass


def charge(order: dict[str, Any]) -> None:
    """Stands in for a payment service."""
    if order.get("card") == "declined":
        raise PaymentDeclined("payment declined")


def init_db(dsn: str = DSN) -> None:
    """The app's migrations: its tables and the job table."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement)
    with pgqueue.Queue(dsn, table=TABLE) as queue:
        queue.install()


def create_app(dsn: str = DSN) -> Flask:
    """The app, with one connection pool shared by its views and its queue."""
    app = Flask(__name__)
    # autocommit: a transaction is opened explicitly where one is wanted.
    pool = ConnectionPool(dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True)
    queue = pgqueue.Queue(pool, table=TABLE)  # the queue borrows connections from the pool

    @app.post("/orders")
    def create_order() -> tuple[dict[str, Any], int]:
        order = request.get_json(silent=True) or {}
        if not order.get("item") or not order.get("email"):
            return {"error": "item and email are required"}, 400
        with pool.connection() as conn, conn.transaction():
            row = conn.execute(INSERT_ORDER, (order["item"], order["email"])).fetchone()
            assert row is not None
            order_id = row[0]
            # Same connection, same transaction: the job commits with the order.
            job_id = queue.enqueue("send_receipt", {"order_id": order_id}, conn=conn)
            charge(order)  # raises PaymentDeclined: the order and its job roll back together
        return {"order_id": order_id, "job_id": job_id}, 201

    @app.errorhandler(PaymentDeclined)
    def payment_declined(exc: PaymentDeclined) -> tuple[dict[str, Any], int]:
        return {"error": str(exc)}, 402

    # The pool lives as long as the process; the demo closes it.
    app.extensions["pgqueue"] = queue
    app.extensions["pool"] = pool
    return app


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
    queue: pgqueue.Queue = app.extensions["pgqueue"]
    waiting = queue.stats().by_kind.get("send_receipt", {}).get(pgqueue.JobStatus.PENDING, 0)
    app.extensions["pool"].close()
    print(f"orders committed: {items}; send_receipt jobs waiting: {waiting}")
    print("run the worker: pgqueue worker examples.flask_worker:worker --until-empty")


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
