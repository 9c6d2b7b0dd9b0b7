"""``pgqueue bench``: enqueue and drain N trivial jobs on each backend, beside the seed design.

With no DSN it starts an embedded PostgreSQL (the ``embedded`` extra) with
default settings; ``--dsn`` or ``PGQUEUE_DSN`` points it at another server.
Each backend gets a fresh table; every figure is the median of ``--repeat``
runs, and pgqueue's drain rate is reported as a ratio to the seed design
measured on the same server in the same run.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
import psycopg

from .aio.queue import AsyncQueue
from .aio.worker import AsyncWorker
from .core.jobs import Job
from .core.ops import QueueCore
from .core.sql import SeedStatements
from .core.worker import WorkerSettings
from .embedded import dsn_or_embedded
from .sync.driver import run_on
from .sync.queue import Queue
from .sync.worker import Worker

BACKENDS = ("sync", "asyncio", "trio")
SEED_WORKERS = 4
SEED_BATCH = 20


@dataclass
class Run:
    """One enqueue-and-drain of ``jobs`` jobs."""

    enqueue_s: float
    drain_s: float


@dataclass
class Result:
    name: str
    jobs: int
    runs: list[Run] = field(default_factory=list)

    @property
    def enqueue_s(self) -> float:
        return statistics.median(r.enqueue_s for r in self.runs)

    @property
    def drain_s(self) -> float:
        return statistics.median(r.drain_s for r in self.runs)

    @property
    def rate(self) -> float:
        return self.jobs / self.drain_s


class Progress:
    """A one-line progress count on stderr while a drain runs (only on a terminal)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self, _job: Any = None) -> None:
        self.done += 1  # a lost increment under threads only blurs the display

    def _show(self) -> None:
        while not self._stop.wait(0.2):
            width = 30
            filled = int(width * min(self.done, self.total) / self.total)
            bar = "#" * filled + "." * (width - filled)
            sys.stderr.write(f"\r  {self.label:<10} [{bar}] {self.done:>8,}/{self.total:,}")
            sys.stderr.flush()

    def __enter__(self) -> Progress:
        if sys.stderr.isatty():
            self._thread = threading.Thread(target=self._show, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            sys.stderr.write("\r" + " " * 70 + "\r")


def _table() -> str:
    return f"bench_{uuid.uuid4().hex[:10]}"


def _drop(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        run_on(conn, QueueCore(table).uninstall())


def _specs(n: int) -> list[tuple[str, Any]]:
    return [("noop", {"n": i}) for i in range(n)]


# -- pgqueue ---------------------------------------------------------------------


def run_sync(dsn: str, n: int, concurrency: int, batch_size: int, *, history: bool) -> Run:
    table = _table()
    try:
        with Queue(dsn, table=table, history=history) as q:
            q.install()
            start = time.perf_counter()
            q.enqueue_many(_specs(n))
            enqueued = time.perf_counter() - start
            with Progress("sync", n) as progress:
                worker = Worker(q, {"noop": progress.tick}, concurrency=concurrency,
                                batch_size=batch_size, handle_signals=False)  # fmt: skip
                start = time.perf_counter()
                worker.run(until_empty=True)
                drained = time.perf_counter() - start
        return Run(enqueued, drained)
    finally:
        _drop(dsn, table)


def run_async(
    dsn: str, n: int, concurrency: int, batch_size: int, backend: str, *, history: bool
) -> Run:
    table = _table()

    async def main() -> Run:
        async with AsyncQueue(dsn, table=table, history=history) as q:
            await q.install()
            start = time.perf_counter()
            await q.enqueue_many(_specs(n))
            enqueued = time.perf_counter() - start
            with Progress(backend, n) as progress:

                async def noop(job: Job) -> None:
                    progress.tick()

                worker = AsyncWorker(q, {"noop": noop}, concurrency=concurrency,
                                     batch_size=batch_size, handle_signals=False)  # fmt: skip
                start = time.perf_counter()
                await worker.run(until_empty=True)
                return Run(enqueued, time.perf_counter() - start)

    try:
        return anyio.run(main, backend=backend)
    finally:
        _drop(dsn, table)


# -- the seed design, as its article wrote it -------------------------------------------


def run_seed(dsn: str, n: int) -> Run:
    """Four asyncio workers, batches of 20, one delete statement per job; enqueue by executemany."""
    table = _table()
    sql = SeedStatements(table)

    async def main() -> Run:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for statement in sql.create:
                await conn.execute(statement)
            start = time.perf_counter()
            async with conn.cursor() as cur, conn.transaction():
                await cur.executemany(
                    sql.insert, [("noop", json.dumps({"n": i})) for i in range(n)]
                )
            enqueued = time.perf_counter() - start

        with Progress("seed", n) as progress:

            async def worker(name: str) -> None:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    while True:
                        cur = await conn.execute(sql.claim, (name, SEED_BATCH))
                        rows = await cur.fetchall()
                        if not rows:
                            return
                        for row in rows:
                            progress.tick()  # the trivial handler
                            await conn.execute(sql.delete, (row[0],))

            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(SEED_WORKERS):
                    tg.start_soon(worker, f"seed-{i}")
            return Run(enqueued, time.perf_counter() - start)

    try:
        return anyio.run(main, backend="asyncio")
    finally:
        _drop(dsn, table)


# -- the command -----------------------------------------------------------------------


def describe_server(dsn: str | None) -> str:
    if dsn:
        return "the server at --dsn / PGQUEUE_DSN"
    return "an embedded PostgreSQL (default settings)"


def measure(args: argparse.Namespace, dsn: str) -> dict[str, Result]:
    results: dict[str, Result] = {}
    plan: list[tuple[str, Callable[[], Run]]] = [
        ("seed", lambda: run_seed(dsn, args.jobs)),
    ]
    for backend in args.backend:
        sizes = (dsn, args.jobs, args.concurrency, args.batch_size)
        if backend == "sync":
            plan.append((backend, functools.partial(run_sync, *sizes, history=args.history)))
        else:
            drain = functools.partial(run_async, *sizes, backend, history=args.history)
            plan.append((backend, drain))
    for name, _ in plan:
        results[name] = Result(name, args.jobs)
    # Interleave the repeats so that a noisy moment hurts every contender alike.
    for repeat in range(args.repeat):
        for name, run in plan:
            if not args.json:
                print(f"run {repeat + 1}/{args.repeat}: {name}...", file=sys.stderr)
            results[name].runs.append(run())
    return results


def report(results: dict[str, Result], args: argparse.Namespace, where: str) -> str:
    seed = results["seed"]
    lines = [
        f"pgqueue bench: {args.jobs:,} trivial jobs, median of {args.repeat} run(s), on {where}",
        f"pgqueue workers: concurrency={args.concurrency}, batch_size={args.batch_size}"
        f"{', history on' if args.history else ''}; "
        f"seed design: {SEED_WORKERS} workers, batches of {SEED_BATCH}, one delete per job",
        "",
        f"{'backend':<10}{'enqueue s':>11}{'drain s':>10}{'jobs/s':>10}{'vs seed':>9}",
    ]
    for name, r in results.items():
        ratio = r.rate / seed.rate
        lines.append(
            f"{name:<10}{r.enqueue_s:>11.3f}{r.drain_s:>10.3f}{r.rate:>10,.0f}{ratio:>8.1f}x"
        )
    pg_enqueue = min(
        (r.enqueue_s for n, r in results.items() if n != "seed"), default=seed.enqueue_s
    )
    lines += [
        "",
        f"enqueue_many is {seed.enqueue_s / pg_enqueue:.1f}x as fast as one-row INSERTs "
        "with executemany (the seed design's enqueue)",
    ]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``pgqueue bench``."""
    p.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN"),
        help="default: $PGQUEUE_DSN, else an embedded server",
    )
    p.add_argument("--jobs", type=int, default=50_000, help="jobs per run (default 50,000)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=WorkerSettings.concurrency,
        help=f"pgqueue worker concurrency (default {WorkerSettings.concurrency})",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=WorkerSettings.batch_size,
        help=f"pgqueue claim batch (default {WorkerSettings.batch_size}, the workers' default)",
    )
    p.add_argument(
        "--backend",
        action="append",
        choices=BACKENDS,
        help="a backend to run (repeatable; default: all three)",
    )
    p.add_argument("--repeat", type=int, default=3, help="runs per contender; the median counts")
    p.add_argument(
        "--history",
        action="store_true",
        help="queues copy each succeeded job to the history table (its cost)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pgqueue bench", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    if args.jobs < 1 or args.repeat < 1 or args.concurrency < 1 or args.batch_size < 1:
        p.error("--jobs, --repeat, --concurrency and --batch-size must be at least 1")
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark for parsed ``pgqueue bench`` arguments."""
    args.backend = args.backend or list(BACKENDS)
    where = describe_server(args.dsn)
    with dsn_or_embedded(args.dsn) as dsn:
        results = measure(args, dsn)
    if args.json:
        seed = results["seed"]
        print(
            json.dumps(
                {
                    "jobs": args.jobs,
                    "repeat": args.repeat,
                    "concurrency": args.concurrency,
                    "batch_size": args.batch_size,
                    "server": where,
                    "results": {
                        name: {
                            "enqueue_s": r.enqueue_s,
                            "drain_s": r.drain_s,
                            "jobs_per_s": r.rate,
                            "ratio_to_seed": r.rate / seed.rate,
                            "runs": [asdict(run) for run in r.runs],
                        }
                        for name, r in results.items()
                    },
                },
                indent=2,
            )
        )
    else:
        print(report(results, args, where))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
