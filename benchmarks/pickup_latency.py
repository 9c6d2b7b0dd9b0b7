"""Pickup latency of an idle worker: from an enqueue's commit to its handler's start.

An idle worker waits with ``poll_interval=60``, so within the run only a
NOTIFY can wake it. A producer thread in the same process enqueues one job
at a time on a psycopg connection of its own (``Queue.enqueue(conn=...)``
then ``commit()``) and notes ``time.perf_counter()`` right after the commit
returns; the handler notes ``perf_counter()`` when it starts. The producer
waits for each job to start, then ``--gap`` seconds, before the next, so
the worker is idle every time. p50 / p99 / max are printed per backend.

``--backend`` is ``asyncio`` (an `AsyncWorker` on asyncio), ``trio`` (the
same on trio) or ``sync`` (a `Worker`, handlers in threads); repeat the
flag for several. Warm-up jobs (not measured) make sure the worker's LISTEN
connection is up before the first sample.

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards; the table is always dropped.

    python benchmarks/pickup_latency.py
    python benchmarks/pickup_latency.py --backend asyncio --backend trio --backend sync
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import psycopg
from psycopg import sql

import pgqueue
from pgqueue.embedded import dsn_or_embedded

BACKENDS = ("asyncio", "trio", "sync")
POLL_INTERVAL = 60.0  # longer than any wait below: only NOTIFY wakes the worker
WARMUP = 5
START_TIMEOUT = 10.0  # seconds a job may take to start before the run is declared broken

_DROP = sql.SQL("DROP TABLE IF EXISTS {table}")


@dataclass
class Samples:
    """Commit and start times (perf_counter) by job number, from two threads."""

    committed: dict[int, float] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)
    events: dict[int, threading.Event] = field(default_factory=dict)

    def expect(self, n: int) -> threading.Event:
        self.events[n] = threading.Event()
        return self.events[n]

    def start(self, job: pgqueue.Job) -> None:
        n = job.payload["n"]
        self.started[n] = time.perf_counter()
        self.events[n].set()

    def latencies_ms(self) -> list[float]:
        return [(self.started[n] - t) * 1000 for n, t in sorted(self.committed.items()) if n >= 0]


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile (p99 of 200 samples is the 2nd largest)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def produce(dsn: str, table: str, samples: Samples, count: int, gap: float) -> None:
    """(A thread.) Warm-up jobs (negative numbers), then ``count`` measured ones."""
    queue = pgqueue.Queue(dsn, table=table)  # only its statements: every job goes on `conn`
    with psycopg.connect(dsn) as conn:
        for n in [*range(-WARMUP, 0), *range(count)]:
            started = samples.expect(n)
            queue.enqueue("probe", {"n": n}, conn=conn)
            conn.commit()
            samples.committed[n] = time.perf_counter()
            # The first warm-up job may wait for the worker's start-up; later ones may not.
            if not started.wait(POLL_INTERVAL if n == -WARMUP else START_TIMEOUT):
                raise RuntimeError(f"job {n} did not start within {START_TIMEOUT}s")
            time.sleep(gap)


def run_async(dsn: str, table: str, count: int, gap: float, backend: str) -> Samples:
    samples = Samples()

    async def probe(job: pgqueue.Job) -> None:
        samples.start(job)

    async def main() -> None:
        async with pgqueue.AsyncQueue(dsn, table=table) as q:
            worker = pgqueue.AsyncWorker(
                q, {"probe": probe}, poll_interval=POLL_INTERVAL, handle_signals=False
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                try:
                    await anyio.to_thread.run_sync(produce, dsn, table, samples, count, gap)
                finally:
                    worker.stop()

    anyio.run(main, backend=backend)
    return samples


def run_sync(dsn: str, table: str, count: int, gap: float) -> Samples:
    samples = Samples()
    with pgqueue.Queue(dsn, table=table) as q:
        worker = pgqueue.Worker(
            q, {"probe": samples.start}, poll_interval=POLL_INTERVAL, handle_signals=False
        )
        thread = threading.Thread(target=worker.run, name="pickup-worker")
        thread.start()
        try:
            produce(dsn, table, samples, count, gap)
        finally:
            worker.stop()
            thread.join()
    return samples


def measure(dsn: str, backend: str, count: int, gap: float) -> list[float]:
    table = f"pickup_{uuid.uuid4().hex[:10]}"
    try:
        with pgqueue.Queue(dsn, table=table) as q:
            q.install()
        run: Callable[[], Samples]
        if backend == "sync":

            def run() -> Samples:
                return run_sync(dsn, table, count, gap)
        else:

            def run() -> Samples:
                return run_async(dsn, table, count, gap, backend)

        return run().latencies_ms()
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_DROP.format(table=sql.Identifier(table)))


def summary(latencies: list[float]) -> dict[str, Any]:
    return {
        "samples": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 3),
        "p99_ms": round(percentile(latencies, 99), 3),
        "min_ms": round(min(latencies), 3),
        "max_ms": round(max(latencies), 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN"),
        help="default: $PGQUEUE_DSN, else an embedded server",
    )
    p.add_argument(
        "--backend",
        action="append",
        choices=BACKENDS,
        help="a backend to measure (repeatable; default: asyncio)",
    )
    p.add_argument("-n", "--samples", type=int, default=200, help="measured jobs (default 200)")
    p.add_argument(
        "--gap", type=float, default=0.02, help="seconds between a start and the next enqueue"
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    if args.samples < 1 or args.gap < 0:
        p.error("--samples must be at least 1 and --gap not negative")
    backends = args.backend or ["asyncio"]

    results: dict[str, dict[str, Any]] = {}
    with dsn_or_embedded(args.dsn) as dsn:
        for backend in backends:
            if not args.json:
                print(f"measuring {backend}...", file=sys.stderr)
            results[backend] = summary(measure(dsn, backend, args.samples, args.gap))
    if args.json:
        print(json.dumps({"gap_s": args.gap, "results": results}, indent=2))
    else:
        print(f"pickup latency (enqueue commit -> handler start), poll_interval={POLL_INTERVAL:g}s")
        print()
        print(f"{'backend':<10}{'samples':>8}{'p50 ms':>9}{'p99 ms':>9}{'min ms':>9}{'max ms':>9}")
        for backend, r in results.items():
            print(
                f"{backend:<10}{r['samples']:>8}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
                f"{r['min_ms']:>9.2f}{r['max_ms']:>9.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
