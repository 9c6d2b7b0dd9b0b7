"""The worker module of scenario 18 (test_schedule_ticks.py): app.py's environment, schedules.

    pgqueue worker tests.reliability.schedule_app:worker              # a pgqueue.Worker
    pgqueue worker tests.reliability.schedule_app:async_worker        # a pgqueue.AsyncWorker
    pgqueue worker tests.reliability.schedule_app:async_worker --trio

The environment is app.py's (the queue, the executions table, the options),
plus ``REL_HOLD`` and ``REL_SCHEDULES``. The queue keeps its history
(``history=True``), so that every job that succeeded can be counted after it
left the table.

Two schedules, on every worker unless ``REL_SCHEDULES=0`` (a worker that
only drains what they enqueued):

- ``tick``: every second, overlap allowed. Its handler counts its execution
  and returns.
- ``tick_solo``: every two seconds, ``overlap=False``. Its handler counts its
  execution and takes `SOLO_SECONDS`, longer than its interval, so that the
  tick after each job finds it still running and is skipped.

In a process started with ``REL_HOLD=1`` (the scenario's victim), both
handlers count their execution and then block until the process is killed:
whatever tick job the victim takes, it holds.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import anyio
import anyio.to_thread

import pgqueue

from .app import DSN, OPTIONS, TABLE, record

HOLD = os.environ.get("REL_HOLD") == "1"
SCHEDULES = os.environ.get("REL_SCHEDULES", "1") == "1"
TICK_EVERY = timedelta(seconds=1)
SOLO_EVERY = timedelta(seconds=2)
SOLO_SECONDS = 3.0

_never = threading.Event()  # never set: what a held job waits on in the victim


def tick(job: pgqueue.Job) -> None:
    record(job)
    if HOLD:
        _never.wait()


def tick_solo(job: pgqueue.Job) -> None:
    record(job)
    if HOLD:
        _never.wait()
    time.sleep(SOLO_SECONDS)


async def tick_async(job: pgqueue.Job) -> None:
    await anyio.to_thread.run_sync(record, job)
    if HOLD:
        await anyio.sleep_forever()


async def tick_solo_async(job: pgqueue.Job) -> None:
    await anyio.to_thread.run_sync(record, job)
    if HOLD:
        await anyio.sleep_forever()
    await anyio.sleep(SOLO_SECONDS)


queue = pgqueue.Queue(DSN, table=TABLE, history=True)
worker = pgqueue.Worker(queue, {"tick": tick, "tick_solo": tick_solo}, **OPTIONS)
async_queue = pgqueue.AsyncQueue(DSN, table=TABLE, history=True)
async_worker = pgqueue.AsyncWorker(
    async_queue, {"tick": tick_async, "tick_solo": tick_solo_async}, **OPTIONS
)
if SCHEDULES:
    for w in (worker, async_worker):
        w.schedule("tick", every=TICK_EVERY, payload={"schedule": "tick"})
        w.schedule("tick_solo", every=SOLO_EVERY, payload={"schedule": "tick_solo"}, overlap=False)
