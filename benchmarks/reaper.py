"""The reaper on a big table, with and without its index of running jobs (migration 6).

Two tables, each with ``--expired`` running jobs of a vanished worker:

- ``dead``: beside them ``--dead`` dead jobs awaiting purge (one ``INSERT
  ... SELECT generate_series``) and ``--running`` running jobs of a live
  worker, then ``VACUUM ANALYZE``;
- ``churn``: beside them the dead index entries a busy queue leaves between
  two vacuums: ``--churn`` jobs claimed and completed (``Queue.claim`` and
  ``Queue.complete``, batches of 100) with autovacuum off on the table,
  then ``ANALYZE``.

For each, with the index as ``install()`` builds it and then with it
dropped (the reaper before migration 6, which scanned the table), it times
the reaper's select (``Statements.expired``, in a transaction of its own,
``--runs`` times) and runs ``Queue.reap`` on a queue whose connections have
``statement_timeout = --statement-timeout``, as a role setting gives them:
how many jobs came back, or "cancelled". The vanished worker's jobs are
made to expire again before each.

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards; the tables are always dropped.

    python benchmarks/reaper.py
    python benchmarks/reaper.py --dead 200000 --churn 20000 --statement-timeout 5ms
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
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.embedded import dsn_or_embedded

VISIBILITY_TIMEOUT = timedelta(minutes=5)


@dataclass
class Result:
    case: str
    index: bool
    rows: int
    table_mb: float
    select_ms_p50: float
    select_ms_max: float
    reap_under_timeout: str


def _fill_dead(raw: Callable[..., Any], args: argparse.Namespace) -> None:
    raw(
        "INSERT INTO {table} (kind, status, attempts, run_at, last_error)"
        " SELECT 'old', 'dead', 3, now() - interval '1 day', 'ValueError: boom'"
        "   FROM generate_series(1, %s)",
        args.dead,
    )
    raw(
        "INSERT INTO {table} (kind, status, attempts, locked_at, locked_by)"
        " SELECT 'busy', 'running', 1, now(), 'live' FROM generate_series(1, %s)",
        args.running,
    )


def _fill_churn(q: pgqueue.Queue, args: argparse.Namespace) -> None:
    q.enqueue_many([("k", n) for n in range(args.churn)])
    while jobs := q.claim(100, worker="busy"):
        q.complete(*jobs)


def measure(dsn: str, case: str, args: argparse.Namespace) -> list[Result]:
    table = f"reaperbench_{uuid.uuid4().hex[:10]}"
    ident = sql.Identifier(table)
    limited = make_conninfo(dsn, options=f"-c statement_timeout={args.statement_timeout}")
    results = []
    with psycopg.connect(dsn, autocommit=True) as conn, pgqueue.Queue(dsn, table=table) as q:

        def raw(query: str, *params: Any) -> list[tuple[Any, ...]]:
            cur = conn.execute(sql.SQL(query).format(table=ident), params or None)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

        try:
            q.install()
            raw("ALTER TABLE {table} SET (autovacuum_enabled = off)")
            start = time.perf_counter()
            if case == "dead":
                _fill_dead(raw, args)
            else:
                _fill_churn(q, args)
            q.enqueue_many([("k", n) for n in range(args.expired)])
            q.claim(args.expired, worker="vanished")
            # Statistics, as autovacuum's analyze would gather; a vacuum only
            # where the case says so.
            raw("VACUUM ANALYZE {table}" if case == "dead" else "ANALYZE {table}")
            print(f"{case}: filled in {time.perf_counter() - start:.1f} s", file=sys.stderr)
            rows = raw("SELECT count(*), pg_relation_size(%s) FROM {table}", table)[0]

            for with_index in (True, False):
                if not with_index:
                    raw(f"DROP INDEX {table}_running")
                times = []
                for _ in range(args.runs):
                    raw(
                        "UPDATE {table} SET locked_at = now() - interval '1 hour'"
                        " WHERE locked_by = 'vanished'"
                    )
                    with conn.transaction():
                        started = time.perf_counter()
                        conn.execute(
                            q.core.sql.maintenance.expired, (VISIBILITY_TIMEOUT,)
                        ).fetchall()
                        times.append((time.perf_counter() - started) * 1000)
                raw(
                    "UPDATE {table} SET locked_at = now() - interval '1 hour'"
                    " WHERE locked_by = 'vanished'"
                )
                with pgqueue.Queue(limited, table=table) as under_timeout:
                    try:
                        back = len(under_timeout.reap(VISIBILITY_TIMEOUT))
                        outcome = f"{back} back"
                    except psycopg.errors.QueryCanceled:
                        outcome = "cancelled"
                # Running again, for the next round.
                q.claim(args.expired, worker="vanished")
                results.append(
                    Result(
                        case=case,
                        index=with_index,
                        rows=rows[0],
                        table_mb=round(rows[1] / 2**20, 1),
                        select_ms_p50=round(statistics.median(times), 2),
                        select_ms_max=round(max(times), 2),
                        reap_under_timeout=outcome,
                    )
                )
        finally:
            q.uninstall()
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN"),
        help="default: $PGQUEUE_DSN, else an embedded server",
    )
    p.add_argument("--dead", type=int, default=2_000_000, help="dead jobs (default 2,000,000)")
    p.add_argument("--running", type=int, default=1_000, help="a live worker's running jobs")
    p.add_argument("--expired", type=int, default=100, help="a vanished worker's jobs")
    p.add_argument(
        "--churn", type=int, default=100_000, help="jobs done since the last vacuum (default 100k)"
    )
    p.add_argument("--runs", type=int, default=7, help="timed selects per case (default 7)")
    p.add_argument("--statement-timeout", default="10ms", help="for Queue.reap (default 10ms)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)

    with dsn_or_embedded(args.dsn) as dsn:
        results = measure(dsn, "dead", args) + measure(dsn, "churn", args)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return 0
    print(
        f"{'case':<7}{'index':<7}{'rows':>11}{'table MB':>10}{'select p50 ms':>15}"
        f"{'max ms':>9}   reap under {args.statement_timeout}"
    )
    for r in results:
        print(
            f"{r.case:<7}{'yes' if r.index else 'no':<7}{r.rows:>11,}{r.table_mb:>10}"
            f"{r.select_ms_p50:>15}{r.select_ms_max:>9}   {r.reap_under_timeout}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
