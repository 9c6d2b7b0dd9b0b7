"""The WAL a no-op job writes, by phase and by record type: where the bytes go.

Enqueues ``--jobs`` trivial jobs with ``enqueue_many`` (one COPY in one
transaction, as ``pgqueue bench`` does), then drains them with an asyncio
worker (``--backend`` for another; default worker settings), and reads the
WAL of each phase with ``pg_walinspect`` (``pg_get_wal_stats(start, end,
per_record => true)``): records and bytes per job for each record type,
full-page images (FPI) apart, and the drain's jobs/s. Every figure is the
median of ``--repeat`` runs, each on a fresh table.

``--checkpoint`` runs a ``CHECKPOINT`` before each phase (it needs the
privilege), so that every page a phase touches costs one full-page image:
the worst case. By default the server's own timing decides, as in
``pgqueue bench``.

``--variant NAME=SQL`` compares the table as installed (``as installed``)
with the same table after ``SQL`` (``{table}`` is the queue table; repeat
the option for more variants, separate statements with ``;``), in turns, so
that a noisy moment hurts all alike:

    python benchmarks/wal.py                       # 50,000 jobs, asyncio, 3 runs
    python benchmarks/wal.py --variant 'ff100=ALTER TABLE {table} SET (fillfactor = 100)'
    python benchmarks/wal.py --jobs 100000 --backend sync --checkpoint --json

Needs the ``pg_walinspect`` extension (PostgreSQL 15+); it is created if
missing (superuser, or pg_read_server_files). Without a DSN an embedded
server with default settings is started and removed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import anyio
import psycopg

import pgqueue
from pgqueue.embedded import dsn_or_embedded

LSN = "SELECT pg_current_wal_insert_lsn()::text"
STATS = """
SELECT "resource_manager/record_type", count, record_size, fpi_size
  FROM pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn, per_record => true)
 WHERE count > 0"""
SETTINGS = ("server_version", "wal_level", "full_page_writes", "wal_compression")


@dataclass
class Phase:
    """One phase of one run: WAL bytes, by record type (count, record bytes, FPI bytes)."""

    total: int = 0
    seconds: float = 0.0
    by_type: dict[str, tuple[int, int, int]] = field(default_factory=dict)


def read_phase(conn: psycopg.Connection[Any], start: str, end: str, seconds: float) -> Phase:
    # Commits with synchronous_commit off (the worker's) may not be flushed
    # yet, and pg_walinspect reads only flushed WAL.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        row = conn.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (end,)).fetchone()
        if row and row[0]:
            break
        time.sleep(0.05)
    row = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)::bigint", (end, start)).fetchone()
    assert row is not None
    rows = conn.execute(STATS, (start, end)).fetchall()
    return Phase(int(row[0]), seconds, {n: (int(c), int(r), int(f)) for n, c, r, f in rows})


async def _noop(job: pgqueue.Job) -> None:
    pass


def one_run(
    dsn: str, jobs: int, backend: str, checkpoint: bool, setup: str | None
) -> tuple[Phase, Phase]:
    """Enqueue and drain ``jobs`` no-op jobs on a fresh table: the WAL of each phase."""
    table = f"walbench_{uuid.uuid4().hex[:10]}"
    specs = [("noop", {"n": i}) for i in range(jobs)]
    with psycopg.connect(dsn, autocommit=True) as meter:
        marks: list[tuple[str, float]] = []
        phases: list[Phase] = []

        def mark() -> None:
            row = meter.execute(LSN).fetchone()
            assert row is not None
            marks.append((str(row[0]), time.perf_counter()))

        def prepare() -> None:
            for statement in (setup or "").split(";"):
                if statement.strip():
                    meter.execute(statement.replace("{table}", table).encode())
            if checkpoint:
                meter.execute("CHECKPOINT")
            mark()

        def between() -> None:
            mark()
            # Read now: the checkpoint may recycle the segments.
            (a, ta), (b, tb) = marks
            phases.append(read_phase(meter, a, b, tb - ta))
            if checkpoint:
                meter.execute("CHECKPOINT")
            mark()

        try:
            if backend == "sync":
                with pgqueue.Queue(dsn, table=table) as q:
                    q.install()
                    prepare()
                    q.enqueue_many(specs)
                    between()
                    pgqueue.Worker(q, {"noop": lambda job: None}, handle_signals=False).run(
                        until_empty=True
                    )
                    mark()
            else:

                async def main() -> None:
                    async with pgqueue.AsyncQueue(dsn, table=table) as q:
                        await q.install()
                        prepare()
                        await q.enqueue_many(specs)
                        between()
                        worker = pgqueue.AsyncWorker(q, {"noop": _noop}, handle_signals=False)
                        await worker.run(until_empty=True)
                        mark()

                anyio.run(main, backend=backend)
            (c, tc), (d, td) = marks[2:]
            return phases[0], read_phase(meter, c, d, td - tc)
        finally:
            with pgqueue.Queue(dsn, table=table) as q:
                q.uninstall()


def summarise(phases: list[Phase], jobs: int) -> dict[str, Any]:
    """Medians per job over runs: the total, jobs/s, and each record type's share."""
    types: set[str] = set().union(*(p.by_type for p in phases))
    rows = {}
    for name in types:
        counts = [p.by_type.get(name, (0, 0, 0)) for p in phases]
        rows[name] = {
            "records_per_job": statistics.median(c[0] for c in counts) / jobs,
            "record_bytes_per_job": statistics.median(c[1] for c in counts) / jobs,
            "fpi_bytes_per_job": statistics.median(c[2] for c in counts) / jobs,
        }
    return {
        "bytes_per_job": statistics.median(p.total for p in phases) / jobs,
        "jobs_per_s": jobs / statistics.median(p.seconds for p in phases),
        "by_type": dict(
            sorted(
                rows.items(),
                key=lambda kv: -(kv[1]["record_bytes_per_job"] + kv[1]["fpi_bytes_per_job"]),
            )
        ),
    }


def show(name: str, s: dict[str, Any]) -> None:
    print(f"  {name}: {s['bytes_per_job']:,.1f} B of WAL per job, {s['jobs_per_s']:,.0f} jobs/s")
    print(f"    {'record type':<28}{'records/job':>12}{'rec B/job':>11}{'FPI B/job':>11}")
    for rtype, r in s["by_type"].items():
        if r["record_bytes_per_job"] + r["fpi_bytes_per_job"] < 0.05:
            continue
        print(
            f"    {rtype:<28}{r['records_per_job']:>12.3f}{r['record_bytes_per_job']:>11.1f}"
            f"{r['fpi_bytes_per_job']:>11.1f}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", default=os.environ.get("PGQUEUE_DSN"))
    p.add_argument("--jobs", type=int, default=50_000, help="jobs per run (default 50,000)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each variant (default 3)")
    p.add_argument("--backend", default="asyncio", choices=("sync", "asyncio", "trio"))
    p.add_argument("--checkpoint", action="store_true", help="a CHECKPOINT before each phase")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=SQL",
        help="also measure the table after SQL ({table}: the queue table); repeatable",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args()
    variants: dict[str, str | None] = {"as installed": None}
    for spec in args.variant:
        name, sep, statement = spec.partition("=")
        if not sep or not name or not statement:
            p.error(f"--variant takes NAME=SQL, not {spec!r}")
        variants[name] = statement
    runs: dict[str, tuple[list[Phase], list[Phase]]] = {v: ([], []) for v in variants}
    with dsn_or_embedded(args.dsn) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            settings = {}
            for s in SETTINGS:
                row = conn.execute(f"SHOW {s}".encode()).fetchone()
                settings[s] = row[0] if row else None
        for _ in range(args.repeat):
            for name, setup in variants.items():
                enqueue, drain = one_run(dsn, args.jobs, args.backend, args.checkpoint, setup)
                runs[name][0].append(enqueue)
                runs[name][1].append(drain)
    result = {
        "jobs": args.jobs,
        "backend": args.backend,
        "repeat": args.repeat,
        "checkpoint": args.checkpoint,
        "settings": settings,
        "variants": {
            name: {
                "setup": variants[name],
                "enqueue": summarise(enqueue, args.jobs),
                "drain": summarise(drain, args.jobs),
            }
            for name, (enqueue, drain) in runs.items()
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{args.jobs:,} no-op jobs, {args.backend}, median of {args.repeat}"
        f"{', CHECKPOINT before each phase' if args.checkpoint else ''}; "
        + ", ".join(f"{k}={v}" for k, v in settings.items())
    )
    for name, v in result["variants"].items():
        total = v["enqueue"]["bytes_per_job"] + v["drain"]["bytes_per_job"]
        print(f"\n{name}: {total:,.1f} B of WAL per job to enqueue and drain")
        if v["setup"]:
            print(f"  after: {v['setup']}")
        show("enqueue (enqueue_many)", v["enqueue"])
        show("drain (claim, run, delete)", v["drain"])


if __name__ == "__main__":
    main()
