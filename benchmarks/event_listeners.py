"""What job events cost a draining worker: no listener, a no-op listener, Prometheus.

Each run enqueues ``--jobs`` trivial jobs into a fresh table and drains them
with an `AsyncWorker` (``async def`` handler that returns at once) or, with
``--backend sync``, a `Worker` (plain handler), ``until_empty``, and
reports jobs per second. Three variants take turns within each repeat, so
that noise on the machine is shared fairly:

* ``none``: no listener (the worker skips events and run-time measurement);
* ``no-op``: one listener that does nothing (the cost of the events themselves:
  two per job, ``claimed`` and ``succeeded``, and a run time per job);
* ``prometheus``: `pgqueue.prometheus.PrometheusMetrics` on a private registry.

The median of ``--repeat`` runs is printed per variant, with its ratio to
``none``. Needs the ``prometheus`` extra.

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards; tables are always dropped.

    python benchmarks/event_listeners.py
    python benchmarks/event_listeners.py --jobs 50000 --repeat 5 --backend sync
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import psycopg
from prometheus_client import CollectorRegistry
from psycopg import sql

import pgqueue
from pgqueue.embedded import dsn_or_embedded
from pgqueue.prometheus import PrometheusMetrics

VARIANTS: dict[str, Callable[[], Any]] = {
    "none": lambda: None,
    "no-op": lambda: lambda event: None,
    "prometheus": lambda: PrometheusMetrics(registry=CollectorRegistry()),
}


def drain(dsn: str, jobs: int, backend: str, on_event: Any) -> float:
    """Enqueue ``jobs`` jobs, drain them, return jobs per second of the drain."""
    table = f"eventbench_{uuid.uuid4().hex[:10]}"
    specs = [("noop", {"n": i}) for i in range(jobs)]
    try:
        if backend == "sync":
            with pgqueue.Queue(dsn, table=table) as q:
                q.install()
                q.enqueue_many(specs)
                worker = pgqueue.Worker(
                    q, {"noop": lambda job: None}, handle_signals=False, on_event=on_event
                )
                start = time.perf_counter()
                worker.run(until_empty=True)
                return jobs / (time.perf_counter() - start)

        async def main() -> float:
            async with pgqueue.AsyncQueue(dsn, table=table) as q:
                await q.install()
                await q.enqueue_many(specs)

                async def noop(job: pgqueue.Job) -> None:
                    pass

                worker = pgqueue.AsyncWorker(
                    q, {"noop": noop}, handle_signals=False, on_event=on_event
                )
                start = time.perf_counter()
                await worker.run(until_empty=True)
                return jobs / (time.perf_counter() - start)

        return anyio.run(main, backend=backend)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dsn", default=os.environ.get("PGQUEUE_DSN"), help="default: $PGQUEUE_DSN, else embedded"
    )
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per run (default 20,000)")
    p.add_argument("--repeat", type=int, default=3, help="runs per variant (default 3)")
    p.add_argument("--backend", choices=("asyncio", "trio", "sync"), default="asyncio")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with dsn_or_embedded(args.dsn) as dsn:
        for i in range(args.repeat):
            for name, make in VARIANTS.items():
                print(f"run {i + 1}/{args.repeat}: {name}...", file=sys.stderr)
                rates[name].append(drain(dsn, args.jobs, args.backend, make()))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    if args.json:
        print(json.dumps({"backend": args.backend, "jobs": args.jobs, "runs": rates}))
        return 0
    print(f"{args.jobs:,} trivial jobs on {args.backend}, median of {args.repeat} run(s)")
    print(f"{'listener':12} {'jobs/s':>9} {'vs none':>8}")
    for name, rate in medians.items():
        print(f"{name:12} {rate:9,.0f} {rate / medians['none']:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
