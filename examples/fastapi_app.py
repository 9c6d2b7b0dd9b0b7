"""pgqueue in a FastAPI app: an order and its receipt job commit in one SQLAlchemy transaction.

    pip install 'pgqueue-jobs[fastapi,sqlalchemy]' uvicorn
    export PGQUEUE_DSN=$(pgqueue embedded start)   # or your server's DSN
    uvicorn examples.fastapi_app:app        # the app, with its worker in its lifespan
    python examples/fastapi_app.py          # the same

    curl -X POST localhost:8000/orders -H 'content-type: application/json' \\
         -d '{"item": "teapot", "email": "ann@example.com"}'
    curl localhost:8000/orders/1            # the order, and whether its receipt was sent

``POST /orders`` adds the order through the ORM and enqueues its
``send_receipt`` job on the session's own connection
(`pgqueue.contrib.sqlalchemy`): one transaction. When the payment is
declined the view raises inside it, and neither the order nor the job
exists. The worker runs in the app's lifespan (`pgqueue.contrib.starlette`),
on the server's event loop; when the server shuts down (Ctrl-C, SIGTERM) it
stops gracefully, letting running jobs finish.

The lifespan creates the tables (idempotent). ``PGQUEUE_TABLE`` names the
job table (default ``fastapi_jobs``); the orders table is ``<table>_orders``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import func, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import pgqueue
from pgqueue.contrib.sqlalchemy import async_psycopg_connection
from pgqueue.contrib.starlette import get_queue, running
from pgqueue.embedded import local_dsn

# Unset, the local server that `pgqueue embedded start` keeps (started if need be).
DSN = os.environ.get("PGQUEUE_DSN") or local_dsn()
TABLE = os.environ.get("PGQUEUE_TABLE", "fastapi_jobs")


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = f"{TABLE}_orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]
    email: Mapped[str]
    # Set by the worker when it sends the receipt: its handler is idempotent through it.
    receipt_sent_at: Mapped[datetime | None]


async def connect() -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(DSN)


# SQLAlchemy on psycopg 3: the connection under a session is one pgqueue can join.
engine = create_async_engine("postgresql+psycopg://", async_creator=connect)
Session = async_sessionmaker(engine, expire_on_commit=False)

queue = pgqueue.AsyncQueue(DSN, table=TABLE)
worker = pgqueue.AsyncWorker(queue, concurrency=4)


def send_mail(to: str, subject: str) -> None:
    """Stands in for a mail service."""
    print(f"mail to {to}: {subject}", flush=True)


@worker.handler("send_receipt")
async def send_receipt(job: pgqueue.Job) -> dict[str, str]:
    """Send an order's receipt once, however many times the job runs.

    Delivery is at-least-once. The receipt is marked sent in the same
    transaction as the sending: a repeated job finds the mark and sends
    nothing; if the mail service raises, the mark rolls back and the job is
    retried.
    """
    order_id = job.payload["order_id"]
    async with Session() as session, session.begin():
        mark_sent = (
            update(Order)
            .where(Order.id == order_id, Order.receipt_sent_at.is_(None))
            .values(receipt_sent_at=func.now())
            .returning(Order.email, Order.item)
        )
        row = (await session.execute(mark_sent)).one_or_none()
        if row is None:
            print(f"order {order_id}: receipt already sent, nothing to do", flush=True)
            return {"sent_to": ""}
        send_mail(row.email, f"your receipt for order {order_id} ({row.item})")
        return {"sent_to": row.email}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    """The app's start-up and shutdown: its tables, then the queue and its worker."""
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    async with running(queue, worker=worker, install=True):
        yield {"pgqueue": queue}  # get_queue finds it here
    await engine.dispose()
    print("shutdown: worker stopped, queue closed", flush=True)


app = FastAPI(lifespan=lifespan)


async def get_session() -> AsyncIterator[AsyncSession]:
    async with Session() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]
QueueDep = Annotated[pgqueue.AsyncQueue, Depends(get_queue)]


class OrderIn(BaseModel):
    item: str
    email: str
    card: str = "ok"


class PaymentDeclined(Exception):
    pass


def charge(order: OrderIn) -> None:
    """Stands in for a payment service."""
    if order.card == "declined":
        raise PaymentDeclined("payment declined")


@app.post("/orders", status_code=201)
async def create_order(order: OrderIn, session: SessionDep, queue: QueueDep) -> dict[str, int]:
    try:
        async with session.begin():
            row = Order(item=order.item, email=order.email)
            session.add(row)
            await session.flush()  # the order's id
            # The session's connection, in the session's transaction: the job commits
            # with the order. The result is kept for a day, for GET /orders/{id}.
            job_id = await queue.enqueue(
                "send_receipt",
                {"order_id": row.id},
                result_ttl=timedelta(days=1),
                conn=await async_psycopg_connection(session),
            )
            charge(order)  # raises PaymentDeclined: the order and its job roll back together
    except PaymentDeclined as exc:
        raise HTTPException(status_code=402, detail=str(exc)) from exc
    return {"order_id": row.id, "job_id": job_id}


@app.get("/orders/{order_id}")
async def show_order(order_id: int, session: SessionDep) -> dict[str, Any]:
    order = await session.get(Order, order_id)
    if order is None:
        raise HTTPException(status_code=404, detail=f"no order {order_id}")
    return {"id": order.id, "item": order.item, "receipt_sent": order.receipt_sent_at is not None}


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app)
