"""Claim latency against deep backlogs: does a claim cost the same at 10k and at 1M?

For each backlog size a fresh queue table is created with
``pgqueue.Queue.install()``, filled in one ``INSERT ... SELECT
generate_series`` and ``VACUUM ANALYZE``d; then ``--claims`` times a batch
of ``--batch`` jobs is taken with `Queue.claim` and at once deleted with
`Queue.complete` (the public sync API, so the measured path is the
product's). All tables are filled first and then claimed from in turns, one
claim per table per round, so that noise on the machine is shared fairly.
Claim latency p50/p99 per case, its ratio to p50 of ``pending 10k`` (when
that case is measured), the buffers one claim touches (``EXPLAIN (ANALYZE,
BUFFERS)`` once after the fill, rolled back), and the ratio of p50 at the
largest backlog to p50 at the smallest, are printed.

Besides the pending-only sizes there are four cases with 10k pending jobs:

* ``dead``: ``--dead`` rows in status ``dead`` (buried jobs an operator has
  not retried). They are outside the partial ready index, so they should
  cost nothing.
* ``deleted``: ``--deleted`` jobs that ran and were deleted, with no VACUUM
  since (autovacuum off for that table): the ready index still holds an
  entry for every one of them, in front of the live ones. This is what a
  queue looks like when vacuum falls behind.
* ``future p100``: ``--future`` jobs of priority 100 due tomorrow, beside
  10k ready jobs of priority 0: what a claim that ordered by priority
  first would have to step over. The claim walks the (queue, priority)
  levels and reads each from its due end, so the level of tomorrow's
  jobs costs it one probe.
* ``snapshot held``: 10k pending, claimed while another session sits in a
  REPEATABLE READ transaction (a long report, a pg_dump). Nothing the
  claims leave behind can be cleaned up meanwhile, so each claim steps over
  the entries of all the jobs claimed before it: watch the ``trend``
  column (p50 of the last tenth of the claims over the first tenth).

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards; tables are always dropped.

    python benchmarks/claim_latency.py
    python benchmarks/claim_latency.py --sizes 10000,100000 --dead 0 --deleted 0 --json
    python benchmarks/claim_latency.py --sizes 10000 --dead 0 --deleted 0 --no-held-snapshot
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

import pgqueue
from pgqueue.core.plans import Query
from pgqueue.embedded import dsn_or_embedded

SMALL_PENDING = 10_000  # the live backlog beside the dead / deleted / future rows
FUTURE_PRIORITY = 100  # the highest: a claim ordered by priority first meets them first


@dataclass
class Case:
    """One table shape to measure."""

    name: str
    pending: int
    dead: int = 0  # rows in status 'dead'
    deleted: int = 0  # jobs deleted without a VACUUM since
    future: int = 0  # jobs of priority FUTURE_PRIORITY due tomorrow
    held_snapshot: bool = False  # another session holds a snapshot throughout


@dataclass
class Measurement:
    case: Case
    fill_s: float
    claim_ms: list[float] = field(default_factory=list)
    complete_ms: list[float] = field(default_factory=list)
    first_claim_ms: float = 0.0
    table_bytes: int = 0
    claim_index_bytes: int = 0
    plan_uses_claim_index: bool = False
    claim_buffers: int = 0  # shared buffers one claim touches, after the fill

    @property
    def p50(self) -> float:
        return percentile(self.claim_ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.claim_ms, 99)

    @property
    def trend(self) -> float:
        """p50 of the last tenth of the claims over p50 of the first tenth."""
        tenth = max(1, len(self.claim_ms) // 10)
        return percentile(self.claim_ms[-tenth:], 50) / percentile(self.claim_ms[:tenth], 50)

    def summary(self) -> dict[str, Any]:
        return {
            **asdict(self.case),
            "fill_s": round(self.fill_s, 3),
            "claims": len(self.claim_ms),
            "claim_p50_ms": round(self.p50, 3),
            "claim_p99_ms": round(self.p99, 3),
            "claim_max_ms": round(max(self.claim_ms), 3),
            "first_claim_ms": round(self.first_claim_ms, 3),
            "last_tenth_over_first_tenth": round(self.trend, 3),
            "complete_p50_ms": round(percentile(self.complete_ms, 50), 3),
            "table_bytes": self.table_bytes,
            "claim_index_bytes": self.claim_index_bytes,
            "plan_uses_claim_index": self.plan_uses_claim_index,
            "claim_buffers": self.claim_buffers,
        }


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile (p99 of 300 samples is the 3rd largest)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))  # ceil without floats drifting
    return ordered[int(rank) - 1]


# -- filling -------------------------------------------------------------------------

_FILL = sql.SQL(
    """
INSERT INTO {table} (kind, payload, status, attempts, last_error, priority, run_at)
SELECT 'noop', jsonb_build_object('n', g), %(status)s,
       CASE WHEN %(status)s = 'dead' THEN 3 ELSE 0 END,
       CASE WHEN %(status)s = 'dead' THEN 'boom' END,
       %(priority)s, now() + %(delay)s::interval
  FROM generate_series(1, %(n)s) AS g"""
)
_DELETE_OLDEST = sql.SQL(
    "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} ORDER BY id LIMIT %s)"
)
_AUTOVACUUM_OFF = sql.SQL("ALTER TABLE {table} SET (autovacuum_enabled = off)")
_VACUUM_ANALYZE = sql.SQL("VACUUM ANALYZE {table}")
_ANALYZE = sql.SQL("ANALYZE {table}")
_DROP = sql.SQL("DROP TABLE IF EXISTS {table}")
_TAKE_SNAPSHOT = sql.SQL("SELECT 1")
_CHECKPOINT = sql.SQL("CHECKPOINT")
_SIZES = sql.SQL("SELECT pg_relation_size(%s::regclass), pg_relation_size(%s::regclass)")
_EXPLAIN = b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
_NOW = timedelta(0)
_TOMORROW = timedelta(days=1)


def rows(status: str, n: int, *, priority: int = 0, delay: timedelta = _NOW) -> dict[str, Any]:
    """The parameters of `_FILL`."""
    return {"status": status, "n": n, "priority": priority, "delay": delay}


def fill(conn: psycopg.Connection[Any], table: sql.Identifier, case: Case) -> None:
    """Write the case's rows; the deleted ones first, so that their ids come first
    (and their index entries sit in front of the live ones, as in a real queue)."""
    if case.deleted:
        conn.execute(_AUTOVACUUM_OFF.format(table=table))
        conn.execute(_FILL.format(table=table), rows("pending", case.deleted))
    if case.dead:
        conn.execute(_FILL.format(table=table), rows("dead", case.dead))
    if case.future:
        future = rows("pending", case.future, priority=FUTURE_PRIORITY, delay=_TOMORROW)
        conn.execute(_FILL.format(table=table), future)
    conn.execute(_FILL.format(table=table), rows("pending", case.pending))
    if case.deleted:
        # Analyzed but not vacuumed: the deleted rows' tuples and index entries stay.
        conn.execute(_DELETE_OLDEST.format(table=table), (case.deleted,))
        conn.execute(_ANALYZE.format(table=table))
    else:
        conn.execute(_VACUUM_ANALYZE.format(table=table))
    # Write the fill out now, so that the claims do not compete with its writeback.
    # (Not ours to force on a shared server without the privilege: noisier numbers then.)
    with suppress(psycopg.errors.InsufficientPrivilege):
        conn.execute(_CHECKPOINT)


# -- measuring -----------------------------------------------------------------------


def prepare(dsn: str, q: pgqueue.Queue, case: Case) -> Measurement:
    """Install, fill and vacuum one case's table."""
    table = sql.Identifier(q.table)
    q.install()
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        fill(conn, table, case)
        index = q.core.sql.claim_index_name
        row = conn.execute(_SIZES, (q.table, index)).fetchone()
        assert row is not None
        buffers = claim_buffers(conn, q, 20)
    result = Measurement(
        case,
        time.perf_counter() - start,
        table_bytes=row[0],
        claim_index_bytes=row[1],
        claim_buffers=buffers,
    )
    result.plan_uses_claim_index = index in q.explain_claim()
    return result


def claim_buffers(conn: psycopg.Connection[Any], q: pgqueue.Queue, batch: int) -> int:
    """The shared buffers (hit or read) one claim of ``batch`` touches, rolled back:
    those of the plan's root, which counts its children's."""
    step = next(q.core.claim(batch, worker="claim-bench").plan)
    assert isinstance(step, Query)
    with conn.transaction(force_rollback=True):
        ((doc,),) = conn.execute(_EXPLAIN + step.query, step.params).fetchall()
    root = doc[0]["Plan"]
    return int(root["Shared Hit Blocks"] + root["Shared Read Blocks"])


def measure(
    dsn: str, todo: list[Case], claims: int, batch: int, warmup: int, *, verbose: bool
) -> list[Measurement]:
    """Fill a table per case, then claim from them in turns: one claim from each
    table per round, so that a noisy moment on the machine hurts every case alike.
    The held-snapshot case goes last, alone: a snapshot holds back every table."""
    tables = [f"claimbench_{uuid.uuid4().hex[:10]}" for _ in todo]
    with ExitStack() as stack:
        stack.callback(drop_tables, dsn, tables)
        runs: list[tuple[pgqueue.Queue, Measurement]] = []
        for case, table in zip(todo, tables, strict=True):
            if verbose:
                print(f"filling {case.name}...", file=sys.stderr)
            q = stack.enter_context(pgqueue.Queue(dsn, table=table, max_connections=2))
            runs.append((q, prepare(dsn, q, case)))
        together = [run for run in runs if not run[1].case.held_snapshot]
        if verbose:
            print(f"claiming from {len(together)} tables in turns...", file=sys.stderr)
        for i in range(warmup + claims):
            for q, result in together:
                claim_once(q, result, i, batch, warmup)
        for q, result in runs:
            if result.case.held_snapshot:
                if verbose:
                    print(f"claiming for {result.case.name}...", file=sys.stderr)
                with held_snapshot(dsn):
                    for i in range(warmup + claims):
                        claim_once(q, result, i, batch, warmup)
        return [result for _, result in runs]


def drop_tables(dsn: str, tables: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            conn.execute(_DROP.format(table=sql.Identifier(table)))


@contextmanager
def held_snapshot(dsn: str) -> Iterator[None]:
    """Another session in a REPEATABLE READ transaction (a long report, a pg_dump):
    while it lasts, no row deleted or updated after it began is dead to everyone,
    so their index entries can be neither vacuumed nor marked dead by index scans."""
    with psycopg.connect(dsn) as holder:
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute(_TAKE_SNAPSHOT)
        try:
            yield
        finally:
            holder.rollback()


def claim_once(q: pgqueue.Queue, result: Measurement, i: int, batch: int, warmup: int) -> None:
    """Claim number ``i`` (the first ``warmup`` are not recorded), then complete it."""
    t0 = time.perf_counter()
    jobs = q.claim(batch, worker="claim-bench")
    t1 = time.perf_counter()
    q.complete(*jobs)
    t2 = time.perf_counter()
    if len(jobs) != batch:
        raise RuntimeError(f"{result.case.name}: claim {i} returned {len(jobs)} jobs")
    if i == 0:
        result.first_claim_ms = (t1 - t0) * 1000
    if i >= warmup:
        result.claim_ms.append((t1 - t0) * 1000)
        result.complete_ms.append((t2 - t1) * 1000)


def cases(args: argparse.Namespace) -> list[Case]:
    found = [Case(f"pending {short(n)}", n) for n in args.sizes]
    if args.dead:
        found.append(
            Case(f"{short(args.dead)} dead + {short(SMALL_PENDING)}", SMALL_PENDING, dead=args.dead)
        )
    if args.deleted:
        found.append(
            Case(
                f"{short(args.deleted)} deleted + {short(SMALL_PENDING)}",
                SMALL_PENDING,
                deleted=args.deleted,
            )
        )
    if args.future:
        found.append(
            Case(
                f"{short(args.future)} future p{FUTURE_PRIORITY} + {short(SMALL_PENDING)}",
                SMALL_PENDING,
                future=args.future,
            )
        )
    if args.held_snapshot:
        found.append(
            Case(f"{short(SMALL_PENDING)}, snapshot held", SMALL_PENDING, held_snapshot=True)
        )
    return found


def short(n: int) -> str:
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def report(results: list[Measurement], args: argparse.Namespace) -> str:
    lines = [
        f"claim latency: {args.claims} claims of {args.batch} (each followed by complete), "
        f"after {args.warmup} warm-up claims",
        "",
        f"{'case':<25}{'fill s':>8}{'table MB':>10}{'index MB':>10}{'first ms':>10}"
        f"{'p50 ms':>9}{'vs 10k':>8}{'p99 ms':>9}{'max ms':>9}{'trend':>7}{'buffers':>9}"
        f"{'complete p50':>14}  index",
    ]
    base = baseline(results)
    for r in results:
        versus = f"{r.p50 / base.p50:>8.2f}" if base else f"{'-':>8}"
        lines.append(
            f"{r.case.name:<25}{r.fill_s:>8.1f}{r.table_bytes / 2**20:>10.1f}"
            f"{r.claim_index_bytes / 2**20:>10.1f}{r.first_claim_ms:>10.2f}{r.p50:>9.2f}"
            f"{versus}{r.p99:>9.2f}{max(r.claim_ms):>9.2f}{r.trend:>7.2f}{r.claim_buffers:>9}"
            f"{percentile(r.complete_ms, 50):>14.2f}"
            f"  {'yes' if r.plan_uses_claim_index else 'NO'}"
        )
    lines += [
        "",
        f"vs 10k: p50 / p50(pending {short(SMALL_PENDING)}); buffers: one claim of 20, "
        "EXPLAIN (ANALYZE, BUFFERS) after the fill",
        "trend: p50 of the last tenth of the claims / p50 of the first tenth",
    ]
    ratio = size_ratio(results)
    if ratio is not None:
        lo, hi, value = ratio
        lines.append(f"p50({short(hi)}) / p50({short(lo)}) = {value:.2f}")
    return "\n".join(lines)


def baseline(results: list[Measurement]) -> Measurement | None:
    """The ``pending 10k`` case, which the cases beside 10k pending compare with."""
    for r in results:
        if r.case == Case(f"pending {short(SMALL_PENDING)}", SMALL_PENDING):
            return r
    return None


def size_ratio(results: list[Measurement]) -> tuple[int, int, float] | None:
    plain = [
        r
        for r in results
        if not (r.case.dead or r.case.deleted or r.case.future or r.case.held_snapshot)
    ]
    if len(plain) < 2:
        return None
    lo = min(plain, key=lambda r: r.case.pending)
    hi = max(plain, key=lambda r: r.case.pending)
    return lo.case.pending, hi.case.pending, hi.p50 / lo.p50


def sizes(text: str) -> list[int]:
    try:
        values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN"),
        help="default: $PGQUEUE_DSN, else an embedded server",
    )
    p.add_argument(
        "--sizes",
        type=sizes,
        default=[10_000, 100_000, 1_000_000],
        help="pending backlogs to measure (default 10000,100000,1000000)",
    )
    p.add_argument(
        "--dead",
        type=int,
        default=1_000_000,
        help="dead rows beside 10k pending; 0 skips the case (default 1000000)",
    )
    p.add_argument(
        "--deleted",
        type=int,
        default=1_000_000,
        help="unvacuumed deleted jobs before 10k pending; 0 skips (default 1000000)",
    )
    p.add_argument(
        "--future",
        type=int,
        default=1_000_000,
        help=f"jobs of priority {FUTURE_PRIORITY} due tomorrow beside 10k pending; "
        "0 skips (default 1000000)",
    )
    p.add_argument(
        "--held-snapshot",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also claim from 10k pending while another session holds a snapshot (default on)",
    )
    p.add_argument("--claims", type=int, default=300, help="measured claims per case")
    p.add_argument("--batch", type=int, default=20, help="jobs per claim (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="unmeasured claims first (default 5)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    if (
        args.claims < 1
        or args.batch < 1
        or min(args.warmup, args.dead, args.deleted, args.future) < 0
    ):
        p.error(
            "--claims and --batch must be at least 1; --warmup, --dead, --deleted, --future >= 0"
        )
    todo = cases(args)
    needed = (args.claims + args.warmup) * args.batch
    if any(c.pending < needed for c in todo):
        p.error(f"every backlog must hold (claims + warmup) * batch = {needed} jobs")

    with dsn_or_embedded(args.dsn) as dsn:
        results = measure(dsn, todo, args.claims, args.batch, args.warmup, verbose=not args.json)
    if args.json:
        ratio = size_ratio(results)
        base = baseline(results)
        out: dict[str, Any] = {
            "claims": args.claims,
            "batch": args.batch,
            "warmup": args.warmup,
            "cases": [r.summary() for r in results],
            "p50_ratio_largest_to_smallest": ratio[2] if ratio else None,
            "p50_ratio_to_pending_10k": {r.case.name: r.p50 / base.p50 for r in results}
            if base
            else None,
        }
        print(json.dumps(out, indent=2))
    else:
        print(report(results, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
