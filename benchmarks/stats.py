"""`Queue.stats()` on a big table beside a small one: counts that never scan.

Two tables, each filled by one ``INSERT ... SELECT generate_series`` with
pending jobs (spread over ``--queues`` queues): ``--rows`` of them (default
10,000,000) and ``--small`` (default 1,000); then ``ANALYZE``, as autovacuum
would soon (``--no-analyze`` leaves the statistics as the fill left them).
Then ``--runs`` calls of ``Queue.stats()`` on each (after one untimed call),
taking the tables in turn so that noise on the machine is shared; it prints
the median of each, their ratio, and whether the big table's counts were
marked estimated (`Stats.estimated`) with the pending count against the
real one.

Filling takes time: about 1 to 2 minutes per 10M rows on a 2-core machine
(the insert, the indexes it maintains, the ANALYZE); ``--rows 1000000``
takes a tenth of that.

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards; the tables are always dropped.

    python benchmarks/stats.py
    python benchmarks/stats.py --rows 1000000 --queues 4 --runs 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg import sql

import pgqueue
from pgqueue.embedded import dsn_or_embedded


@dataclass
class Result:
    rows: int
    fill_s: float
    table_mb: float
    stats_ms_p50: float
    stats_ms_max: float
    estimated: list[str]
    pending_reported: int


def fill(conn: psycopg.Connection[Any], table: str, rows: int, args: argparse.Namespace) -> float:
    start = time.perf_counter()
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (kind, queue, payload)"
            " SELECT 'k', 'q' || mod(i, %s), '{{}}'::jsonb FROM generate_series(1, %s) AS i"
        ).format(sql.Identifier(table)),
        (args.queues, rows),
    )
    if args.analyze:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
    return time.perf_counter() - start


def timed(queue: pgqueue.Queue) -> tuple[float, pgqueue.Stats]:
    started = time.perf_counter()
    stats = queue.stats()
    return (time.perf_counter() - started) * 1000, stats


def measure(dsn: str, args: argparse.Namespace) -> list[Result]:
    sizes = (args.small, args.rows)
    tables = [f"statsbench_{uuid.uuid4().hex[:10]}" for _ in sizes]
    with ExitStack() as stack:
        conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
        queues = [stack.enter_context(pgqueue.Queue(dsn, table=t)) for t in tables]
        try:
            fills = []
            for q, table, rows in zip(queues, tables, sizes, strict=True):
                q.install()
                seconds = fill(conn, table, rows, args)
                fills.append(seconds)
                print(f"{rows:,} rows: filled in {seconds:.1f} s", file=sys.stderr)
            times: list[list[float]] = [[] for _ in sizes]
            last: list[pgqueue.Stats | None] = [None for _ in sizes]
            for q in queues:
                timed(q)  # connections open, statements prepared
            for _ in range(args.runs):
                for i, q in enumerate(queues):
                    ms, last[i] = timed(q)
                    times[i].append(ms)
            results = []
            for i, (table, rows) in enumerate(zip(tables, sizes, strict=True)):
                (size,) = conn.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()  # type: ignore[misc]
                stats = last[i]
                assert stats is not None
                results.append(
                    Result(
                        rows=rows,
                        fill_s=round(fills[i], 1),
                        table_mb=round(size / 2**20, 1),
                        stats_ms_p50=round(statistics.median(times[i]), 2),
                        stats_ms_max=round(max(times[i]), 2),
                        estimated=sorted(stats.estimated),
                        pending_reported=stats.by_status[pgqueue.JobStatus.PENDING],
                    )
                )
            return results
        finally:
            for q in queues:
                q.uninstall()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN"),
        help="default: $PGQUEUE_DSN, else an embedded server",
    )
    p.add_argument("--rows", type=int, default=10_000_000, help="the big table's pending jobs")
    p.add_argument("--small", type=int, default=1_000, help="the small table's pending jobs")
    p.add_argument("--queues", type=int, default=1, help="queues the jobs are spread over")
    p.add_argument("--runs", type=int, default=5, help="timed stats() per table (default 5)")
    p.add_argument(
        "--analyze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ANALYZE after the fill (default: yes)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)

    with dsn_or_embedded(args.dsn) as dsn:
        small, big = measure(dsn, args)
    ratio = big.stats_ms_p50 / small.stats_ms_p50
    if args.json:
        print(json.dumps({"results": [asdict(small), asdict(big)], "ratio": ratio}, indent=2))
        return 0
    print(
        f"{'rows':>12}{'fill s':>8}{'table MB':>10}{'stats p50 ms':>14}{'max ms':>9}"
        f"   estimated  pending reported"
    )
    for r in (small, big):
        print(
            f"{r.rows:>12,}{r.fill_s:>8}{r.table_mb:>10}{r.stats_ms_p50:>14}{r.stats_ms_max:>9}"
            f"   {','.join(r.estimated) or '-':<10} {r.pending_reported:,}"
        )
    print(f"p50 ratio, {big.rows:,} rows / {small.rows:,} rows: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
