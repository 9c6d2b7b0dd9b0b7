"""The worker module of scenarios 19 to 21 (test_job_control_faults.py): job control.

    pgqueue worker tests.reliability.control_app:worker              # a pgqueue.Worker
    pgqueue worker tests.reliability.control_app:async_worker        # a pgqueue.AsyncWorker
    pgqueue worker tests.reliability.control_app:async_worker --trio

The environment is app.py's (the queue, the options, ``REL_RECORD_DSN``),
plus ``REL_HOLD``. Every handler writes its run in ``<table>_spans`` (one
row per run: job id, attempt, kind, process id, the job's ``run_at`` as
claimed, the database's ``clock_timestamp()`` at its start and at its
end, and whether it saw its cancel), on a connection of its own in
autocommit, named as the worker's connections are (``application_name``),
so that the test sees its statements in ``pg_stat_activity`` beside the
worker's.

Kinds:

- ``limited``: start, sleep ``payload["seconds"]``, end (scenario 19, with
  a ``limit_key``).
- ``gather``: start, then wait (polling the spans) until
  ``payload["together"]`` gather jobs have started, end: so many run at
  once, proof that the spans see runs overlap when they do.
- ``polling`` (plain, on every backend): start, then poll
  ``pgqueue.job_context().cancel_requested`` until it is set, note it, and
  ``raise_if_cancelled()``.
- ``checking`` (plain): start, then call ``raise_if_cancelled()`` until it
  raises; note it, and let `pgqueue.JobCancelled` go on.
- ``forever`` (``async def``, async worker only): start, then sleep
  `PATIENCE` seconds; the cancel that ends it is noted.
- ``answer``: start, then return ``{"job", "attempt", "pid"}`` (a job with
  ``result_ttl`` keeps it); in a process started with ``REL_HOLD=1``, block
  until the process is killed instead.

A run that was never cancelled gives up after `PATIENCE` seconds and
returns, so that a lost cancel fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import anyio
import anyio.to_thread
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgqueue

from .app import DSN, OPTIONS, RECORD_DSN, TABLE

SPANS = sql.Identifier(f"{TABLE}_spans")
HOLD = os.environ.get("REL_HOLD") == "1"
PATIENCE = 600.0
# The worker's own name in pg_stat_activity, given to the handlers' connections too.
APPLICATION_NAME = str(conninfo_to_dict(DSN).get("application_name") or "control-app")

START = sql.SQL(
    "INSERT INTO {} (job_id, attempt, kind, pid, run_at) VALUES (%s, %s, %s, %s, %s) RETURNING id"
).format(SPANS)
END = sql.SQL("UPDATE {} SET ended_at = clock_timestamp(), saw_cancel = %s WHERE id = %s").format(
    SPANS
)
GATHERED = sql.SQL("SELECT count(DISTINCT job_id) FROM {} WHERE kind = 'gather'").format(SPANS)

_local = threading.local()
_never = threading.Event()  # never set: what a held job waits on


def _conn() -> psycopg.Connection[Any]:
    """This thread's own autocommit connection for the spans."""
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        dsn = make_conninfo(RECORD_DSN, application_name=APPLICATION_NAME)
        conn = _local.conn = psycopg.connect(dsn, autocommit=True)
    return conn


def start(job: pgqueue.Job) -> int:
    """Write the start of this run; return its span's id."""
    cur = _conn().execute(START, (job.id, job.attempts, job.kind, os.getpid(), job.run_at))
    row = cur.fetchone()
    assert row is not None
    return int(row[0])


def end(span: int, *, saw_cancel: bool = False) -> None:
    _conn().execute(END, (saw_cancel, span))


def gathered() -> int:
    row = _conn().execute(GATHERED).fetchone()
    assert row is not None
    return int(row[0])


def _seconds(job: pgqueue.Job) -> float:
    return float(job.payload["seconds"])


def _answer(job: pgqueue.Job) -> dict[str, int]:
    return {"job": job.id, "attempt": job.attempts, "pid": os.getpid()}


def limited(job: pgqueue.Job) -> None:
    span = start(job)
    time.sleep(_seconds(job))
    end(span)


def _gathered(job: pgqueue.Job) -> None:
    """Poll until ``payload["together"]`` gather jobs have started: none ends
    before the last starts, so they are all under way at that moment."""
    deadline = time.monotonic() + PATIENCE
    while gathered() < job.payload["together"] and time.monotonic() < deadline:
        time.sleep(0.02)


def gather(job: pgqueue.Job) -> None:
    span = start(job)
    _gathered(job)
    end(span)


def polling(job: pgqueue.Job) -> None:
    span = start(job)
    context = pgqueue.job_context()
    deadline = time.monotonic() + PATIENCE
    while not context.cancel_requested and time.monotonic() < deadline:
        time.sleep(0.02)
    end(span, saw_cancel=context.cancel_requested)
    context.raise_if_cancelled()


def checking(job: pgqueue.Job) -> None:
    span = start(job)
    context = pgqueue.job_context()
    deadline = time.monotonic() + PATIENCE
    try:
        while time.monotonic() < deadline:
            context.raise_if_cancelled()
            time.sleep(0.02)
    except pgqueue.JobCancelled:
        end(span, saw_cancel=True)
        raise
    end(span)


def answer(job: pgqueue.Job) -> dict[str, int]:
    start(job)
    if HOLD:
        _never.wait()
    return _answer(job)


async def limited_async(job: pgqueue.Job) -> None:
    span = await anyio.to_thread.run_sync(start, job)
    await anyio.sleep(_seconds(job))
    await anyio.to_thread.run_sync(end, span)


async def gather_async(job: pgqueue.Job) -> None:
    span = await anyio.to_thread.run_sync(start, job)
    await anyio.to_thread.run_sync(_gathered, job)
    await anyio.to_thread.run_sync(end, span)


async def forever_async(job: pgqueue.Job) -> None:
    span = await anyio.to_thread.run_sync(start, job)
    try:
        await anyio.sleep(PATIENCE)
    except anyio.get_cancelled_exc_class():
        # Cancelled (the job's cancel, or the worker's shutdown): say so
        # before the cancellation goes on.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(lambda: end(span, saw_cancel=True))
        raise
    await anyio.to_thread.run_sync(end, span)


async def answer_async(job: pgqueue.Job) -> dict[str, int]:
    await anyio.to_thread.run_sync(start, job)
    if HOLD:
        await anyio.sleep_forever()
    return _answer(job)


queue = pgqueue.Queue(DSN, table=TABLE)
worker = pgqueue.Worker(
    queue,
    {"limited": limited, "gather": gather, "polling": polling, "checking": checking,
     "answer": answer},
    **OPTIONS,
)  # fmt: skip
async_queue = pgqueue.AsyncQueue(DSN, table=TABLE)
async_worker = pgqueue.AsyncWorker(
    async_queue,
    {"limited": limited_async, "gather": gather_async, "polling": polling, "checking": checking,
     "forever": forever_async, "answer": answer_async},
    **OPTIONS,
)  # fmt: skip
