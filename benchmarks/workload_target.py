"""The worker of ``workload.py``'s CPU-bound case, for ``pgqueue worker``:

    cd benchmarks && pgqueue worker workload_target:worker --processes 2

Set up by the environment ``workload.py`` gives it: ``WORKLOAD_DSN``,
``WORKLOAD_TABLE``, ``WORKLOAD_CONCURRENCY``, ``WORKLOAD_LOOPS`` (the
`cpu_work` of one job) and ``WORKLOAD_LOG``, a file to which every handler
appends its process id and the `time.monotonic` of its start and end (one
clock for every process of the machine).
"""

from __future__ import annotations

import os
import time

from workload_kit import KIND, cpu_work

import pgqueue

LOOPS = int(os.environ["WORKLOAD_LOOPS"])
LOG = os.environ["WORKLOAD_LOG"]


def crunch(job: pgqueue.Job) -> None:
    start = time.monotonic()
    cpu_work(LOOPS)
    end = time.monotonic()
    # One write of one short line to a file opened for appending: lines of
    # several processes and threads do not mix.
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, f"{os.getpid()} {start} {end}\n".encode())
    finally:
        os.close(fd)


queue = pgqueue.Queue(os.environ["WORKLOAD_DSN"], table=os.environ["WORKLOAD_TABLE"])
worker = pgqueue.Worker(queue, {KIND: crunch}, concurrency=int(os.environ["WORKLOAD_CONCURRENCY"]))
