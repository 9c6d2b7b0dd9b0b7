"""Drain through PgBouncer in transaction mode, beside the same drain straight to the server.

Each run enqueues ``--jobs`` trivial jobs with one `AsyncQueue.enqueue_many`
and drains them with ``--workers`` `AsyncWorker`s on asyncio (each on an
`AsyncQueue` of its own, ``until_empty``, ``--concurrency`` and
``--batch-size`` as ``pgqueue bench``'s), once with every connection
straight to the server and once through a PgBouncer in transaction pooling
mode with ``--pool-size`` server connections (queues opened with
``transaction_pooling=True``), and once straight to the server with
``transaction_pooling=True`` (``unprepared``: what the pooler's hop costs
apart from psycopg's prepared statements). The paths take turns,
``--repeat`` times each, on the same server in the same run; the medians
count.

PgBouncer is Debian's ``pgbouncer`` binary, started as the test suite
starts it (``tests/bouncer.py``), unless ``--bouncer`` names one already
running in front of the same server. With no ``--dsn`` (or
``PGQUEUE_DSN``) an embedded PostgreSQL with default settings is started
and removed afterwards; the tables are always dropped.

    python benchmarks/pgbouncer.py
    python benchmarks/pgbouncer.py --jobs 50000 --workers 4 --pool-size 8 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import anyio
import psycopg
from psycopg import sql

import pgqueue
from pgqueue.core.worker import WorkerSettings
from pgqueue.embedded import dsn_or_embedded

# The PgBouncer launcher is the test suite's (tests/bouncer.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.bouncer import pgbouncer


@dataclass
class Drains:
    """The runs of one path: straight to the server, or through PgBouncer."""

    name: str
    jobs: int
    enqueue_s: list[float] = field(default_factory=list)
    drain_s: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.jobs / statistics.median(self.drain_s)


async def drain_once(dsn: str, args: argparse.Namespace, *, pooled: bool) -> tuple[float, float]:
    table = f"bouncerbench_{uuid.uuid4().hex[:10]}"
    options = {"table": table, "transaction_pooling": pooled}
    try:
        async with pgqueue.AsyncQueue(dsn, **options) as q:
            await q.install()
            start = time.perf_counter()
            await q.enqueue_many([("noop", {"n": i}) for i in range(args.jobs)])
            enqueued = time.perf_counter() - start

            async def noop(job: pgqueue.Job) -> None:
                pass

            queues = [pgqueue.AsyncQueue(dsn, **options) for _ in range(args.workers)]
            for each in queues:
                await each.open()
            try:
                workers = [
                    pgqueue.AsyncWorker(each, {"noop": noop}, concurrency=args.concurrency,
                                        batch_size=args.batch_size, handle_signals=False)
                    for each in queues
                ]  # fmt: skip
                start = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for worker in workers:
                        tg.start_soon(lambda w=worker: w.run(until_empty=True))
                drained = time.perf_counter() - start
                left = (await q.stats()).by_status[pgqueue.JobStatus.PENDING]
                if left:
                    raise RuntimeError(f"{left} jobs left after the drain")
            finally:
                for each in queues:
                    await each.close()
            return enqueued, drained
    finally:
        with psycopg.connect(args.server, autocommit=True) as conn:
            for name in (table, f"{table}_history"):
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


@contextmanager
def bouncer_for(server: str, args: argparse.Namespace) -> Iterator[str]:
    if args.bouncer:
        yield args.bouncer
        return
    with pgbouncer(server, pool_size=args.pool_size) as url:
        yield url


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", default=os.environ.get("PGQUEUE_DSN"),
                   help="the server (default: $PGQUEUE_DSN, else an embedded one)")  # fmt: skip
    p.add_argument("--bouncer", help="a PgBouncer in transaction mode in front of --dsn")
    p.add_argument("--jobs", type=int, default=50_000, help="jobs per run (default 50,000)")
    p.add_argument("--workers", type=int, default=4, help="AsyncWorkers (default 4)")
    p.add_argument("--concurrency", type=int, default=WorkerSettings.concurrency)
    p.add_argument("--batch-size", type=int, default=WorkerSettings.batch_size)
    p.add_argument("--pool-size", type=int, default=8,
                   help="PgBouncer's server connections (default 8)")  # fmt: skip
    p.add_argument("--repeat", type=int, default=3, help="runs per path; the median counts")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    names = ("direct", "unprepared", "pgbouncer")
    paths = {name: Drains(name, args.jobs) for name in names}
    with dsn_or_embedded(args.dsn) as server, bouncer_for(server, args) as bouncer:
        args.server = server
        for i in range(args.repeat):
            # Rotate the order, so that a slower moment falls on every path.
            order = names[i % 3 :] + names[: i % 3]
            for name in order:
                dsn = bouncer if name == "pgbouncer" else server
                enqueued, drained = anyio.run(
                    lambda d=dsn, n=name: drain_once(d, args, pooled=n != "direct")
                )
                paths[name].enqueue_s.append(enqueued)
                paths[name].drain_s.append(drained)
                print(f"run {i + 1} {name:<10} enqueue {enqueued:6.2f} s  drain {drained:6.2f} s",
                      file=sys.stderr)  # fmt: skip
    if args.json:
        print(json.dumps({k: {**asdict(v), "rate": v.rate} for k, v in paths.items()}, indent=2))
        return 0
    direct = paths["direct"].rate
    print(f"{args.jobs:,} jobs, {args.workers} workers x concurrency {args.concurrency}, "
          f"batch {args.batch_size}; PgBouncer pool {args.pool_size}; "
          f"medians of {args.repeat}")  # fmt: skip
    print(f"{'path':<11}{'enqueue s':>10}{'drain s':>9}{'jobs/s':>9}{'vs direct':>11}")
    for v in paths.values():
        enqueue, drain = statistics.median(v.enqueue_s), statistics.median(v.drain_s)
        print(f"{v.name:<11}{enqueue:>10.2f}{drain:>9.2f}{v.rate:>9,.0f}"
              f"{v.rate / direct:>11.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
