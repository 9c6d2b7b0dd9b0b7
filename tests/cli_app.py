"""A worker module for the process-level tests of ``pgqueue worker`` (tests/test_cli.py).

    pgqueue worker tests.cli_app:worker         # a pgqueue.Worker
    pgqueue worker tests.cli_app:async_worker   # a pgqueue.AsyncWorker (add --trio for trio)

Everything comes from the environment, read at import: ``PGQUEUE_DSN`` and
``PGQUEUE_TABLE`` name the queue; ``CLI_APP_RUNS_DSN`` (default
``PGQUEUE_DSN``) is where handlers record their runs; ``CLI_APP_CONCURRENCY``,
``CLI_APP_BATCH_SIZE`` and ``CLI_APP_VISIBILITY_TIMEOUT`` (seconds) set the
workers' options. The test creates the tables ``<table>_runs`` (one row per
handler start and finish) and ``<table>_release`` (``block`` jobs wait until
it has a row).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

import pgqueue

DSN = os.environ["PGQUEUE_DSN"]
TABLE = os.environ["PGQUEUE_TABLE"]
RUNS_DSN = os.environ.get("CLI_APP_RUNS_DSN", DSN)
RUNS = sql.Identifier(f"{TABLE}_runs")
RELEASE = sql.Identifier(f"{TABLE}_release")
# Long enough for any test; a block job never waits forever.
RELEASE_PATIENCE = 90.0

OPTIONS: dict[str, Any] = {
    "concurrency": int(os.environ.get("CLI_APP_CONCURRENCY", "4")),
    "batch_size": int(os.environ.get("CLI_APP_BATCH_SIZE", "20")),
    "visibility_timeout": timedelta(
        seconds=float(os.environ.get("CLI_APP_VISIBILITY_TIMEOUT", "300"))
    ),
    "poll_interval": 0.2,
}


def record(job: pgqueue.Job, event: str) -> None:
    """Write down, on a connection of the handler's own, that ``job`` started or finished."""
    with psycopg.connect(RUNS_DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} (job_id, attempts, pid, event) VALUES (%s, %s, %s, %s)").format(
                RUNS
            ),
            (job.id, job.attempts, os.getpid(), event),
        )


def noop(job: pgqueue.Job) -> None:
    record(job, "finish")


def block(job: pgqueue.Job) -> None:
    """Start, then hold the job until the test releases it."""
    record(job, "start")
    deadline = time.monotonic() + RELEASE_PATIENCE
    with psycopg.connect(RUNS_DSN, autocommit=True) as conn:
        query = sql.SQL("SELECT EXISTS (SELECT FROM {})").format(RELEASE)
        while conn.execute(query).fetchone() != (True,):
            if time.monotonic() > deadline:
                raise TimeoutError("never released")
            time.sleep(0.05)
    record(job, "finish")


def quick(job: pgqueue.Job) -> None:
    """Nothing: a worker that ran one claims beyond one job per runner (`Pace`)."""


HANDLERS = {"noop": noop, "block": block, "quick": quick}

queue = pgqueue.Queue(DSN, table=TABLE)
worker = pgqueue.Worker(queue, HANDLERS, **OPTIONS)

async_queue = pgqueue.AsyncQueue(DSN, table=TABLE)
async_worker = pgqueue.AsyncWorker(async_queue, HANDLERS, **OPTIONS)
