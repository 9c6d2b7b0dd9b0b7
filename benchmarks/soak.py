"""Soak under a held snapshot: does the claim stay O(batch) while the xmin horizon is held?

A producer enqueues ``--rate`` jobs per second (an `AsyncQueue.enqueue_many`
every 100 ms, paced by the clock, on a pool of its own) while an
`AsyncWorker` on asyncio (default settings) drains them, for ``--minutes``.
For the middle half of the run another session holds a ``REPEATABLE READ``
transaction whose snapshot is taken (what a long report, ``pg_dump``, a
replication slot or a standby with ``hot_standby_feedback`` does): no row
deleted or updated meanwhile can be cleaned up, so every job claimed leaves
a dead entry in the claim index until the snapshot goes.

Per phase (``before``, ``held``, ``after``) it reports:

* the claim's latency, p50 and p99: every statement of the worker that
  claims (its turn: outcomes and claim in one round trip), timed around
  ``execute`` by a cursor class on the worker's own pool;
* shared buffers per claim: about once a second (``--explain-every``) one
  of the worker's own claims is first run under ``EXPLAIN (ANALYZE,
  BUFFERS)`` with the same parameters and rolled back; the median of the
  phase's samples;
* index entries read per job claimed (``idx_tup_read`` of the claim index,
  ``<table>_unlimited``, over the jobs claimed): what a claim walks past;
* dead tuples (``pg_stat_user_tables.n_dead_tup``, the largest sampled);
* drain rate (jobs handled in the phase per second) and the largest backlog
  (enqueued, not yet handled) sampled.

The verdict compares the held phase with the unheld ones (before and after
together): p99 ratio and drain-rate ratio.

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards; the queue's tables are always
dropped.
``--smoke`` runs a few seconds at a low rate, to see that it works.

    python benchmarks/soak.py                       # 2,000 jobs/s for 10 minutes
    python benchmarks/soak.py --minutes 2 --json
    python benchmarks/soak.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

import pgqueue
from pgqueue.embedded import dsn_or_embedded

ENQUEUE_EVERY = 0.1  # seconds between enqueue_many calls
PHASES = ("before", "held", "after")
# What every claiming statement of the worker says (its turn, and a plain claim).
CLAIM_MARK = b"SET status = 'running', locked_at = now()"

_SAMPLE = sql.SQL(
    """
SELECT s.n_dead_tup, i.idx_tup_read, pg_relation_size(%(index)s::regclass)
  FROM pg_stat_user_tables AS s, pg_stat_user_indexes AS i
 WHERE s.relid = %(table)s::regclass AND i.indexrelid = %(index)s::regclass"""
)
EXPLAIN = b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
_HOLD = sql.SQL("SELECT count(*) FROM {table}")


def _buffers(plan: Any) -> int:
    """Shared buffers (hit and read) of an ``EXPLAIN (FORMAT JSON)`` result."""
    top = plan[0]["Plan"]
    return int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))


@dataclass
class Probe:
    """What the worker's cursors record; written by the worker's tasks only."""

    explain_every: float
    claims: list[tuple[float, float]] = field(default_factory=list)  # (at, seconds)
    buffers: list[tuple[float, int]] = field(default_factory=list)  # (at, shared buffers)
    next_explain: float = 0.0


def timed_cursor(probe: Probe) -> type[psycopg.AsyncCursor[Any]]:
    class TimedCursor(psycopg.AsyncCursor[Any]):
        async def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            text = query if isinstance(query, bytes) else b""
            if CLAIM_MARK not in text:
                return await super().execute(query, params, **kw)
            now = time.perf_counter()
            if probe.explain_every and now >= probe.next_explain:
                probe.next_explain = now + probe.explain_every
                # The same statement and parameters, rolled back: what this
                # very claim reads (its outcomes' writes included).
                async with self.connection.transaction(force_rollback=True):
                    await super().execute(EXPLAIN + text, params)
                    row = await self.fetchone()
                assert row is not None
                probe.buffers.append((now, _buffers(row[0])))
            start = time.perf_counter()
            result = await super().execute(query, params, **kw)
            probe.claims.append((start, time.perf_counter() - start))
            return result

    return TimedCursor


@dataclass
class Sample:
    t: float  # seconds since the start
    enqueued: int
    handled: int
    dead_tuples: int
    index_reads: int  # idx_tup_read of the claim index, cumulative
    index_bytes: int


@dataclass
class Phase:
    name: str
    seconds: float
    claims: int
    claim_p50_ms: float
    claim_p99_ms: float
    buffers_per_claim: float | None  # median of the EXPLAIN samples
    index_reads_per_job: float
    dead_tuples_max: int
    jobs_per_s: float
    backlog_max: int


class Run:
    def __init__(self, args: argparse.Namespace, dsn: str, table: str) -> None:
        self.args = args
        self.dsn = dsn
        self.table = table
        self.duration = args.minutes * 60
        self.enqueued = 0
        self.handled = 0
        self.samples: list[Sample] = []
        self.probe = Probe(args.explain_every)
        self.start = 0.0
        self.held_at: tuple[float, float] | None = None  # when the snapshot was taken, released
        self.stopping: anyio.Event

    def phase_of(self, t: float) -> str:
        if t < self.duration / 4:
            return "before"
        return "held" if t < 3 * self.duration / 4 else "after"

    async def main(self) -> None:
        self.stopping = anyio.Event()
        cursor = timed_cursor(self.probe)

        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            # Not in the pool's kwargs: the worker's LISTEN connection is made
            # from those, and it is not an asyncio one on every backend.
            conn.cursor_factory = cursor

        pool = AsyncConnectionPool(
            self.dsn,
            min_size=1,
            max_size=10,
            kwargs={"autocommit": True},
            configure=configure,
            open=False,
        )
        async with (
            pool,
            pgqueue.AsyncQueue(pool, table=self.table) as worker_queue,
            pgqueue.AsyncQueue(self.dsn, table=self.table, max_connections=2) as producer,
            await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as monitor,
            await psycopg.AsyncConnection.connect(self.dsn) as holder,
        ):
            await producer.install()

            async def noop(job: pgqueue.Job) -> None:
                self.handled += 1

            worker = pgqueue.AsyncWorker(worker_queue, {"noop": noop}, handle_signals=False)
            if not self.args.json:
                s = worker.settings
                print(
                    f"soak: {self.args.rate} jobs/s for {self.args.minutes:g} min, a snapshot "
                    f"held for the middle half; worker concurrency={s.concurrency} "
                    f"batch_size={s.batch_size}",
                    file=sys.stderr,
                )
                print(header(), flush=True)
            self.start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                async with anyio.create_task_group() as load:
                    load.start_soon(self.produce, producer)
                    load.start_soon(self.hold, holder)
                    await self.sample_all(monitor)
                    self.stopping.set()
                worker.stop()

    async def pause_until(self, at: float) -> bool:
        """Sleep until ``at`` seconds into the run; False if the run ends first."""
        with anyio.move_on_after(max(0.0, self.start + at - time.perf_counter())):
            await self.stopping.wait()
        return not self.stopping.is_set()

    async def produce(self, queue: pgqueue.AsyncQueue) -> None:
        tick = 0
        while True:
            tick += 1
            if not await self.pause_until(tick * ENQUEUE_EVERY):
                return
            due = int(self.args.rate * (time.perf_counter() - self.start)) - self.enqueued
            if due > 0:
                await queue.enqueue_many([("noop", {"n": self.enqueued + i}) for i in range(due)])
                self.enqueued += due

    async def hold(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not await self.pause_until(self.duration / 4):
            return
        await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        # The first statement takes the snapshot; from here the horizon is held.
        await conn.execute(_HOLD.format(table=sql.Identifier(self.table)))
        taken = time.perf_counter() - self.start
        await self.pause_until(3 * self.duration / 4)
        await conn.rollback()
        self.held_at = (taken, time.perf_counter() - self.start)

    async def sample_all(self, conn: psycopg.AsyncConnection[Any]) -> None:
        tick = 0
        while True:
            at = min(tick * self.args.sample, self.duration)
            await anyio.sleep(max(0.0, self.start + at - time.perf_counter()))
            await self.sample(conn)
            if at >= self.duration:
                return
            tick += 1

    async def sample(self, conn: psycopg.AsyncConnection[Any]) -> None:
        t = time.perf_counter() - self.start
        handled, enqueued = self.handled, self.enqueued
        params = {"table": self.table, "index": f"{self.table}_unlimited"}
        cur = await conn.execute(_SAMPLE, params)
        row = await cur.fetchone()
        assert row is not None
        sample = Sample(round(t, 2), enqueued, handled, *row)
        prev = self.samples[-1] if self.samples else None
        self.samples.append(sample)
        if not self.args.json:
            print(row_text(sample, prev, self.phase_of(t)), flush=True)

    def phases(self) -> list[Phase]:
        out = []
        bounds = {"before": (0.0, 0.25), "held": (0.25, 0.75), "after": (0.75, 1.0)}
        for name in PHASES:
            lo, hi = (f * self.duration for f in bounds[name])
            times = sorted(d for at, d in self.probe.claims if lo <= at - self.start < hi)
            bufs = [b for at, b in self.probe.buffers if lo <= at - self.start < hi]
            inside = [s for s in self.samples if lo <= s.t <= hi]
            first, last = (inside[0], inside[-1]) if inside else (None, None)
            span = last.t - first.t if first and last else 0.0
            handled = last.handled - first.handled if first and last else 0
            reads = last.index_reads - first.index_reads if first and last else 0
            out.append(
                Phase(
                    name,
                    round(span, 2),
                    len(times),
                    round(1000 * quantile(times, 0.5), 3),
                    round(1000 * quantile(times, 0.99), 3),
                    statistics.median(bufs) if bufs else None,
                    round(reads / handled, 1) if handled else 0.0,
                    max((s.dead_tuples for s in inside), default=0),
                    round(handled / span, 1) if span else 0.0,
                    max((s.enqueued - s.handled for s in inside), default=0),
                )
            )
        return out


def quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def header() -> str:
    return (
        f"{'t s':>7} {'phase':>6}{'enqueued':>10}{'handled':>10}{'jobs/s':>8}{'backlog':>9}"
        f"{'dead tup':>10}{'idx reads/job':>14}{'index MB':>10}"
    )


def row_text(s: Sample, prev: Sample | None, phase: str) -> str:
    span = s.t - prev.t if prev else 0.0
    handled = s.handled - prev.handled if prev else 0
    rate = handled / span if span else 0.0
    reads = (s.index_reads - prev.index_reads) / handled if prev and handled else 0.0
    return (
        f"{s.t:>7.1f} {phase:>6}{s.enqueued:>10}{s.handled:>10}{rate:>8.0f}"
        f"{s.enqueued - s.handled:>9}{s.dead_tuples:>10}{reads:>14.1f}"
        f"{s.index_bytes / 2**20:>10.2f}"
    )


def verdict(phases: list[Phase]) -> dict[str, float | None]:
    """The held phase against the unheld ones: p99 ratio, drain-rate ratio."""
    by = {p.name: p for p in phases}
    unheld = [by["before"], by["after"]]
    p99 = statistics.mean(p.claim_p99_ms for p in unheld)
    rate = statistics.mean(p.jobs_per_s for p in unheld)
    held = by["held"]
    return {
        "p99_ratio": round(held.claim_p99_ms / p99, 2) if p99 else None,
        "rate_ratio": round(held.jobs_per_s / rate, 3) if rate else None,
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
    p.add_argument("--rate", type=int, default=2000, help="jobs enqueued per second (2000)")
    p.add_argument("--minutes", type=float, default=10.0, help="length of the run (default 10)")
    p.add_argument("--sample", type=float, default=5.0, help="seconds between samples (5)")
    p.add_argument(
        "--explain-every",
        type=float,
        default=1.0,
        help="seconds between EXPLAIN (ANALYZE, BUFFERS) samples of a claim; 0: none (1)",
    )
    p.add_argument("--smoke", action="store_true", help="a few seconds at a low rate")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    if args.smoke:
        args.rate, args.minutes, args.sample, args.explain_every = 300, 0.1, 0.5, 0.25
    if args.rate < 1 or args.minutes <= 0 or args.sample <= 0 or args.explain_every < 0:
        p.error("--rate, --minutes and --sample must be positive, --explain-every not negative")

    table = f"soak_{uuid.uuid4().hex[:10]}"
    with dsn_or_embedded(args.dsn) as dsn:
        run = Run(args, dsn, table)
        try:
            anyio.run(run.main, backend="asyncio")
        finally:
            # The table and every side table install() made.
            with pgqueue.Queue(dsn, table=table) as queue:
                queue.uninstall()

    phases = run.phases()
    found = verdict(phases)
    if args.json:
        report = {
            "rate": args.rate,
            "minutes": args.minutes,
            "held": run.held_at,
            "phases": [asdict(ph) for ph in phases],
            "verdict": found,
            "samples": [asdict(s) for s in run.samples],
        }
        print(json.dumps(report, indent=2))
        return 0
    print()
    print(
        f"{'phase':<8}{'claims':>8}{'p50 ms':>9}{'p99 ms':>9}{'buf/claim':>11}"
        f"{'idx reads/job':>14}{'dead tup':>10}{'jobs/s':>9}{'backlog':>9}"
    )
    for ph in phases:
        bufs = "-" if ph.buffers_per_claim is None else f"{ph.buffers_per_claim:.0f}"
        print(
            f"{ph.name:<8}{ph.claims:>8}{ph.claim_p50_ms:>9.2f}{ph.claim_p99_ms:>9.2f}{bufs:>11}"
            f"{ph.index_reads_per_job:>14.1f}{ph.dead_tuples_max:>10}{ph.jobs_per_s:>9.0f}"
            f"{ph.backlog_max:>9}"
        )
    print(f"held vs unheld: claim p99 x{found['p99_ratio']}, drain rate x{found['rate_ratio']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
