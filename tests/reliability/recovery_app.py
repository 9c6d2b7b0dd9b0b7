"""The worker module of the recovery drill (test_recovery.py): app.py's queue, other handlers.

    pgqueue worker tests.reliability.recovery_app:worker              # a pgqueue.Worker
    pgqueue worker tests.reliability.recovery_app:async_worker        # a pgqueue.AsyncWorker
    pgqueue worker tests.reliability.recovery_app:async_worker --trio

The environment is app.py's (the queue, the executions table, the options),
plus ``REL_HOLD`` and ``REL_BUSY_SECONDS``. Three kinds of job:

- ``held``: counts its execution; in a process started with ``REL_HOLD=1``
  (the drill's victim) it then blocks until the process is killed, elsewhere
  it returns.
- ``held_poison``: the same, but where it does not block it takes the process
  down (``os._exit(3)``) instead of returning.
- ``busy``: counts its execution and takes ``REL_BUSY_SECONDS`` (default
  0.01): the load that keeps the other workers busy.

The held kinds count their executions on one connection per process, under
a lock: the victim runs 100 of them at once, and a connection each would
use up the server's connections.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.to_thread
import psycopg

import pgqueue

from .app import BACKEND, DSN, INSERT, OPTIONS, async_queue, queue, record

HOLD = os.environ.get("REL_HOLD") == "1"
BUSY_SECONDS = float(os.environ.get("REL_BUSY_SECONDS", "0.01"))

_lock = threading.Lock()
_conn: psycopg.Connection[Any] | None = None
_never = threading.Event()  # never set: what a held job waits on in the victim


def record_held(job: pgqueue.Job) -> None:
    """Count one execution of a held kind, on the process's one connection for them."""
    global _conn
    with _lock:
        if _conn is None:
            _conn = psycopg.connect(DSN, autocommit=True)
        _conn.execute(
            INSERT,
            (
                job.id,
                job.attempts,
                os.getpid(),
                BACKEND,
                job.locked_by,
                job.run_at,
                job.created_at,
                datetime.now(UTC),
            ),
        )


def held(job: pgqueue.Job) -> None:
    record_held(job)
    if HOLD:
        _never.wait()


def held_poison(job: pgqueue.Job) -> None:
    record_held(job)
    if HOLD:
        _never.wait()
    os._exit(3)


def busy(job: pgqueue.Job) -> None:
    record(job)
    time.sleep(BUSY_SECONDS)


async def held_async(job: pgqueue.Job) -> None:
    await anyio.to_thread.run_sync(record_held, job)
    if HOLD:
        await anyio.sleep_forever()


async def held_poison_async(job: pgqueue.Job) -> None:
    await anyio.to_thread.run_sync(record_held, job)
    if HOLD:
        await anyio.sleep_forever()
    os._exit(3)


async def busy_async(job: pgqueue.Job) -> None:
    await anyio.to_thread.run_sync(record, job)
    await anyio.sleep(BUSY_SECONDS)


worker = pgqueue.Worker(queue, {"held": held, "held_poison": held_poison, "busy": busy}, **OPTIONS)
async_worker = pgqueue.AsyncWorker(
    async_queue,
    {"held": held_async, "held_poison": held_poison_async, "busy": busy_async},
    **OPTIONS,
)
