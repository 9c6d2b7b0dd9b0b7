"""The worker module the reliability suite runs in processes of their own.

    pgqueue worker tests.reliability.app:worker              # a pgqueue.Worker
    pgqueue worker tests.reliability.app:async_worker        # a pgqueue.AsyncWorker
    pgqueue worker tests.reliability.app:async_worker --trio

Everything comes from the environment, read at import: ``PGQUEUE_DSN`` and
``PGQUEUE_TABLE`` name the queue; ``REL_EXECUTIONS`` the table where every
handler execution is counted (default ``<table>_executions``);
``REL_BACKEND`` the label recorded with each execution; ``REL_CONCURRENCY``,
``REL_BATCH_SIZE``, ``REL_POLL_INTERVAL`` and ``REL_VISIBILITY_TIMEOUT``
(seconds) the workers' options. ``REL_POOL_SIZE`` gives the queue a small
pool: a ``psycopg_pool.ConnectionPool`` of that size passed to the queue
(sync and trio), or the queue's own pool capped by ``max_connections``
(asyncio, whose ``AsyncConnectionPool`` cannot be opened before the loop
runs; ``REL_ASYNC_LOOP`` says which loop the process runs);
``REL_POOL_TIMEOUT`` is how long a caller waits for one of its connections.
``REL_MAX_CONNECTIONS`` caps the pool the queue opens for itself;
``REL_CALL_TIMEOUT`` and ``REL_GRACE_PERIOD`` (seconds) and
``REL_LISTEN_DSN`` (``listen_conninfo``) set those worker options when
given. ``REL_RECORD_DSN`` is where handlers count their runs (default
``PGQUEUE_DSN``): a test that breaks the worker's way to the server keeps
the count on a way of its own.

Kinds: ``count`` (count, return), ``poison`` (count, then ``os._exit``),
``sleep`` (count, then sleep ``payload["seconds"]``, or on a later attempt
``payload["retry_seconds"]`` if given, 0.3 s if the payload is no object:
in a thread for the sync worker, awaiting for the async one)
and, for the async worker only, ``block`` (count, then ``time.sleep`` as
long on the event loop: the blocking handler the docs warn about; then
await ``payload["then_await"]`` seconds, if given).

A handler counts its execution with an ``INSERT`` on a connection of its
own, in autocommit: the row exists once the handler has run, whatever
becomes of the job's outcome afterwards (a crash, a restart, a lost lease).
That is the honest count for at-least-once delivery.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio.to_thread
import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

import pgqueue

DSN = os.environ["PGQUEUE_DSN"]
RECORD_DSN = os.environ.get("REL_RECORD_DSN", DSN)
TABLE = os.environ["PGQUEUE_TABLE"]
EXECUTIONS = sql.Identifier(os.environ.get("REL_EXECUTIONS", f"{TABLE}_executions"))
BACKEND = os.environ.get("REL_BACKEND", "?")
# A handler that cannot record its run keeps trying this long (a restarting server).
RECORD_PATIENCE = 120.0

OPTIONS: dict[str, Any] = {
    "concurrency": int(os.environ.get("REL_CONCURRENCY", "4")),
    "batch_size": int(os.environ.get("REL_BATCH_SIZE", "50")),
    "poll_interval": float(os.environ.get("REL_POLL_INTERVAL", "0.5")),
    "visibility_timeout": timedelta(seconds=float(os.environ.get("REL_VISIBILITY_TIMEOUT", "300"))),
    "name": f"{BACKEND}:{os.getpid()}",
}
if "REL_CALL_TIMEOUT" in os.environ:
    OPTIONS["call_timeout"] = float(os.environ["REL_CALL_TIMEOUT"])
if "REL_LISTEN_DSN" in os.environ:
    OPTIONS["listen_conninfo"] = os.environ["REL_LISTEN_DSN"]
if "REL_GRACE_PERIOD" in os.environ:
    OPTIONS["grace_period"] = float(os.environ["REL_GRACE_PERIOD"])
QUEUE_OPTIONS: dict[str, Any] = {}
if "REL_MAX_CONNECTIONS" in os.environ:
    QUEUE_OPTIONS["max_connections"] = int(os.environ["REL_MAX_CONNECTIONS"])

INSERT = sql.SQL(
    "INSERT INTO {} (job_id, attempts, pid, backend, worker, run_at, created_at, client_time)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
).format(EXECUTIONS)
# The same, with when the job was claimed (the server's clock): `record`'s.
INSERT_CLAIMED = sql.SQL(
    "INSERT INTO {} (job_id, attempts, pid, backend, worker, run_at, created_at, client_time,"
    " locked_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
).format(EXECUTIONS)

_local = threading.local()


def record(job: pgqueue.Job) -> None:
    """Count one execution of ``job``, on this thread's own autocommit connection."""
    deadline = time.monotonic() + RECORD_PATIENCE
    while True:
        conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
        try:
            if conn is None or conn.closed:
                conn = _local.conn = psycopg.connect(RECORD_DSN, autocommit=True)
            conn.execute(
                INSERT_CLAIMED,
                (
                    job.id,
                    job.attempts,
                    os.getpid(),
                    BACKEND,
                    job.locked_by,
                    job.run_at,
                    job.created_at,
                    datetime.now(UTC),
                    job.locked_at,
                ),
            )
            return
        except psycopg.OperationalError:
            if conn is not None:
                conn.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def count(job: pgqueue.Job) -> None:
    record(job)


def poison(job: pgqueue.Job) -> None:
    """Count the execution, then take the whole process down with it."""
    record(job)
    os._exit(3)


def seconds(job: pgqueue.Job) -> float:
    """How long a sleep or block job takes: its payload's ``seconds`` (on a
    later attempt ``retry_seconds``, if given), or 0.3 s."""
    if not isinstance(job.payload, dict):
        return 0.3
    if job.attempts > 1 and "retry_seconds" in job.payload:
        return float(job.payload["retry_seconds"])
    return float(job.payload["seconds"])


def sleep(job: pgqueue.Job) -> None:
    record(job)
    time.sleep(seconds(job))


async def count_async(job: pgqueue.Job) -> None:
    await anyio.to_thread.run_sync(record, job)


async def sleep_async(job: pgqueue.Job) -> None:
    await anyio.to_thread.run_sync(record, job)
    await anyio.sleep(seconds(job))


async def block_async(job: pgqueue.Job) -> None:
    """Count the execution, then hold the event loop (the mistake the worker warns of)."""
    await anyio.to_thread.run_sync(record, job)
    time.sleep(seconds(job))  # noqa: ASYNC251 - on purpose
    if isinstance(job.payload, dict):
        await anyio.sleep(job.payload.get("then_await", 0))


async def poison_async(job: pgqueue.Job) -> None:
    await anyio.to_thread.run_sync(record, job)
    os._exit(3)


def _pool() -> ConnectionPool | None:
    size = os.environ.get("REL_POOL_SIZE")
    if not size:
        return None
    return ConnectionPool(
        DSN,
        min_size=1,
        max_size=int(size),
        timeout=float(os.environ.get("REL_POOL_TIMEOUT", "30")),
        kwargs={"autocommit": True},
        open=True,
        name="reliability-small",
    )


_small = _pool()
queue = pgqueue.Queue(_small or DSN, table=TABLE, **QUEUE_OPTIONS)
worker = pgqueue.Worker(queue, {"count": count, "poison": poison, "sleep": sleep}, **OPTIONS)

if _small is not None and os.environ.get("REL_ASYNC_LOOP") == "asyncio":
    async_queue = pgqueue.AsyncQueue(
        DSN, table=TABLE, max_connections=int(os.environ["REL_POOL_SIZE"])
    )
else:
    async_queue = pgqueue.AsyncQueue(_small or DSN, table=TABLE, **QUEUE_OPTIONS)
async_worker = pgqueue.AsyncWorker(
    async_queue,
    {"count": count_async, "poison": poison_async, "sleep": sleep_async, "block": block_async},
    **OPTIONS,
)
