"""Sustained load: enqueue and drain at a steady rate; do the table and its index stay flat?

A producer enqueues ``--rate`` jobs per second (one `AsyncQueue.enqueue_many`
every 100 ms, on a pool of its own) while an `AsyncWorker` on asyncio drains
them, for ``--minutes``. Every ``--sample`` seconds a third connection
records the throughput, the backlog (ready jobs), the size of the table,
of its partial claim index (pending jobs) and of the whole relation (table, indexes,
TOAST), and what ``pg_stat_user_tables`` says about dead tuples, HOT
updates and autovacuum runs. Autovacuum runs with the server's settings.

The verdict compares the largest size seen in the last third of the run
with the largest seen in the middle third: a queue that deletes its
finished jobs and is vacuumed should stop growing once autovacuum has been
round once or twice (its default nap is one minute, so give it at least two).

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards; the table is always dropped.

``--scheduled N`` first writes N jobs due tomorrow: the table is then big
although the backlog is not, as with many delayed jobs, and autovacuum's
default threshold (20% of the rows) is far away.

    python benchmarks/sustained.py --minutes 2
    python benchmarks/sustained.py --minutes 2 --table-option fillfactor=70
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import anyio
import psycopg
from psycopg import sql

import pgqueue
from pgqueue.core.worker import WorkerSettings
from pgqueue.embedded import dsn_or_embedded

ENQUEUE_EVERY = 0.1  # seconds between enqueue_many calls


@dataclass
class Sample:
    t: float  # seconds since the start
    enqueued: int
    handled: int
    jobs_per_s: float  # handled since the previous sample, per second
    backlog: int  # pending jobs that are due
    table_bytes: int
    claim_index_bytes: int
    total_bytes: int
    dead_tuples: int
    updates: int
    hot_updates: int
    autovacuums: int


@dataclass
class Verdict:
    what: str
    middle_max: int
    last_max: int

    @property
    def growth(self) -> float:
        return self.last_max / self.middle_max - 1 if self.middle_max else 0.0

    def text(self, tolerance: float) -> str:
        grown = f"+{mb(self.last_max - self.middle_max)} MB, +{self.growth:.1%}"
        if self.last_max <= self.middle_max:
            state = "stopped growing"
        elif self.growth <= tolerance:
            state = f"flat within {tolerance:.0%} ({grown})"
        else:
            state = f"STILL GROWING ({grown})"
        return (
            f"{self.what:<12} middle third max {mb(self.middle_max)} MB, "
            f"last third max {mb(self.last_max)} MB: {state}"
        )


def mb(n: int) -> str:
    return f"{n / 2**20:.2f}"


_SAMPLE = sql.SQL(
    """
SELECT (SELECT count(*) FROM {table} WHERE status = 'pending' AND run_at <= now()),
       pg_relation_size(%(table)s::regclass),
       pg_relation_size(%(index)s::regclass),
       pg_total_relation_size(%(table)s::regclass),
       s.n_dead_tup, s.n_tup_upd, s.n_tup_hot_upd, s.autovacuum_count
  FROM pg_stat_user_tables AS s
 WHERE s.relid = %(table)s::regclass"""
)
_SET_OPTION = sql.SQL("ALTER TABLE {table} SET ({name} = {value})")
_DROP = sql.SQL("DROP TABLE IF EXISTS {table}")
# Jobs due tomorrow: in the claim index (at the far end of their level) and in the table's
# row count, which scales autovacuum's threshold, but never claimed here.
_SCHEDULE = sql.SQL(
    """
INSERT INTO {table} (kind, payload, run_at)
SELECT 'later', jsonb_build_object('n', g), now() + interval '1 day'
  FROM generate_series(1, %s) AS g"""
)
_VACUUM_ANALYZE = sql.SQL("VACUUM ANALYZE {table}")


def table_option(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


class Run:
    def __init__(self, args: argparse.Namespace, dsn: str, table: str) -> None:
        self.args = args
        self.dsn = dsn
        self.table = table
        self.enqueued = 0
        self.handled = 0
        self.samples: list[Sample] = []
        self.start = 0.0
        self.stopping: anyio.Event
        self.settings: WorkerSettings

    async def main(self) -> None:
        args = self.args
        self.stopping = anyio.Event()
        async with (
            pgqueue.AsyncQueue(self.dsn, table=self.table) as worker_queue,
            pgqueue.AsyncQueue(self.dsn, table=self.table, max_connections=2) as producer,
            await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as monitor,
        ):
            await producer.install()
            for name, value in args.table_option:
                await monitor.execute(
                    _SET_OPTION.format(
                        table=sql.Identifier(self.table),
                        name=sql.Identifier(name),
                        value=sql.Literal(value),
                    )
                )
            if args.scheduled:
                table = sql.Identifier(self.table)
                await monitor.execute(_SCHEDULE.format(table=table), (args.scheduled,))
                await monitor.execute(_VACUUM_ANALYZE.format(table=table))

            async def noop(job: pgqueue.Job) -> None:
                self.handled += 1

            options: dict[str, Any] = {}
            if args.concurrency is not None:
                options["concurrency"] = args.concurrency
            if args.batch_size is not None:
                options["batch_size"] = args.batch_size
            worker = pgqueue.AsyncWorker(
                worker_queue, {"noop": noop}, handle_signals=False, **options
            )
            self.settings = worker.settings
            if not args.json:
                print(
                    f"sustained: {args.rate} jobs/s for {args.minutes:g} min; worker "
                    f"concurrency={worker.settings.concurrency} "
                    f"batch_size={worker.settings.batch_size}; table options "
                    f"{dict(args.table_option) or 'none'}; {args.scheduled} jobs scheduled",
                    file=sys.stderr,
                )
                print(header(), flush=True)
            self.start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                # The sampler ends the run after its last sample; no task is
                # cancelled in the middle of a statement, and the worker stops
                # gracefully.
                async with anyio.create_task_group() as load:
                    load.start_soon(self.produce, producer)
                    await self.sample_all(monitor)
                    self.stopping.set()
                worker.stop()

    async def pause_until(self, deadline: float) -> bool:
        """Sleep until ``deadline`` (perf_counter); False if the run ends first."""
        with anyio.move_on_after(max(0.0, deadline - time.perf_counter())):
            await self.stopping.wait()
        return not self.stopping.is_set()

    async def produce(self, queue: pgqueue.AsyncQueue) -> None:
        # Paced by the clock, not by sleeps, so a slow enqueue is caught up.
        tick = 0
        while True:
            tick += 1
            if not await self.pause_until(self.start + tick * ENQUEUE_EVERY):
                return
            due = int(self.args.rate * (time.perf_counter() - self.start)) - self.enqueued
            if due > 0:
                await queue.enqueue_many([("noop", {"n": self.enqueued + i}) for i in range(due)])
                self.enqueued += due

    async def sample_all(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """A sample at the start and every ``--sample`` seconds until the run's end."""
        count = math.ceil(self.args.minutes * 60 / self.args.sample)
        for tick in range(count + 1):
            await anyio.sleep(max(0.0, self.start + tick * self.args.sample - time.perf_counter()))
            await self.sample(conn)

    async def sample(self, conn: psycopg.AsyncConnection[Any]) -> None:
        t = time.perf_counter() - self.start
        handled = self.handled
        params = {"table": self.table, "index": f"{self.table}_claim"}
        cur = await conn.execute(_SAMPLE.format(table=sql.Identifier(self.table)), params)
        row = await cur.fetchone()
        assert row is not None
        prev = self.samples[-1] if self.samples else None
        rate = (handled - prev.handled) / (t - prev.t) if prev and t > prev.t else 0.0
        sample = Sample(round(t, 1), self.enqueued, handled, rate, *row)
        self.samples.append(sample)
        if not self.args.json:
            print(row_text(sample), flush=True)


def header() -> str:
    return (
        f"{'t s':>6}{'enqueued':>10}{'handled':>10}{'jobs/s':>8}{'backlog':>9}"
        f"{'table MB':>10}{'ready MB':>10}{'total MB':>10}{'dead tup':>10}"
        f"{'upd':>10}{'hot upd':>9}{'autovac':>8}"
    )


def row_text(s: Sample) -> str:
    return (
        f"{s.t:>6.0f}{s.enqueued:>10}{s.handled:>10}{s.jobs_per_s:>8.0f}{s.backlog:>9}"
        f"{mb(s.table_bytes):>10}{mb(s.claim_index_bytes):>10}{mb(s.total_bytes):>10}"
        f"{s.dead_tuples:>10}{s.updates:>10}{s.hot_updates:>9}{s.autovacuums:>8}"
    )


def verdicts(samples: list[Sample], duration: float) -> list[Verdict]:
    middle = [s for s in samples if duration / 3 <= s.t < 2 * duration / 3]
    last = [s for s in samples if s.t >= 2 * duration / 3]
    if not middle or not last:
        return []
    found = []
    for what, attr in (
        ("table", "table_bytes"),
        ("claim index", "claim_index_bytes"),
        ("total", "total_bytes"),
    ):
        found.append(
            Verdict(
                what,
                max(getattr(s, attr) for s in middle),
                max(getattr(s, attr) for s in last),
            )
        )
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN"),
        help="default: $PGQUEUE_DSN, else an embedded server",
    )
    p.add_argument("--rate", type=int, default=2000, help="jobs enqueued per second (2000)")
    p.add_argument("--minutes", type=float, default=3.0, help="length of the run (default 3)")
    p.add_argument("--sample", type=float, default=10.0, help="seconds between samples (10)")
    p.add_argument("--concurrency", type=int, help="worker concurrency (default: pgqueue's)")
    p.add_argument("--batch-size", type=int, help="worker claim batch (default: pgqueue's)")
    p.add_argument(
        "--table-option",
        type=table_option,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a storage parameter set on the table after install, e.g. fillfactor=70 or "
        "autovacuum_vacuum_scale_factor=0.01 (repeatable)",
    )
    p.add_argument(
        "--scheduled",
        type=int,
        default=0,
        help="jobs due tomorrow, written before the run: a big table that is not a "
        "backlog (default 0)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.0,
        help="growth of the last third over the middle third still called flat, as a "
        "fraction (default 0: any growth counts)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    if args.rate < 1 or args.minutes <= 0 or args.sample <= 0 or args.scheduled < 0:
        p.error("--rate, --minutes and --sample must be positive, --scheduled not negative")

    table = f"sustained_{uuid.uuid4().hex[:10]}"
    duration = args.minutes * 60
    with dsn_or_embedded(args.dsn) as dsn:
        run = Run(args, dsn, table)
        try:
            anyio.run(run.main, backend="asyncio")
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(_DROP.format(table=sql.Identifier(table)))

    found = verdicts(run.samples, duration)
    final = run.samples[-1]
    mean_rate = final.handled / final.t if final.t else 0.0
    if args.json:
        print(
            json.dumps(
                {
                    "rate": args.rate,
                    "minutes": args.minutes,
                    "concurrency": run.settings.concurrency,
                    "batch_size": run.settings.batch_size,
                    "table_options": dict(args.table_option),
                    "scheduled": args.scheduled,
                    "mean_jobs_per_s": mean_rate,
                    "samples": [asdict(s) for s in run.samples],
                    "verdicts": [
                        {**asdict(v), "growth": v.growth, "text": v.text(args.tolerance)}
                        for v in found
                    ],
                },
                indent=2,
            )
        )
    else:
        print()
        print(f"mean throughput {mean_rate:.0f} jobs/s; {final.backlog} ready at the end")
        if not found:
            print("too few samples for a verdict: run longer or sample more often")
        for v in found:
            print(v.text(args.tolerance))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
