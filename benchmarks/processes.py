"""CPU-bound jobs with ``pgqueue worker --processes 1`` and ``--processes 2``.

Each job is ``--work-ms`` of pure-Python arithmetic (the loop's length is
measured once here, then given to every worker process), so that a single
process runs one job at a time whatever its threads (the GIL). Each run
enqueues ``--jobs`` jobs into a fresh table and starts
``python -m pgqueue worker benchmarks.processes:worker --processes N
--until-empty`` (``--concurrency`` and ``--batch-size`` set each process's
worker); the table's row count is polled every 20 ms, and the rate is
taken between the moments 10 % and 90 % of the jobs were gone, so that
neither the processes' start-up nor the last stragglers count. The two
values of N take turns within each repeat, so that noise on the machine is
shared fairly; the median of ``--repeat`` runs of each is printed, with the
ratio of 2 to 1.

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards; tables are always dropped.

    python benchmarks/processes.py
    python benchmarks/processes.py --jobs 4000 --repeat 5 --work-ms 2
    python benchmarks/processes.py --concurrency 4 --batch-size 100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

import pgqueue

ROOT = Path(__file__).resolve().parent.parent


def burn(loops: int) -> int:
    """Pure-Python arithmetic: it holds the GIL throughout."""
    total = 0
    for i in range(loops):
        total += i * i % 7
    return total


def loops_for(work_ms: float) -> int:
    """How many loops of `burn` take ``work_ms`` milliseconds here (the best
    of 20 probes: on a busy machine most are slowed by other work)."""
    probe = 200_000
    best = min(_timed(probe) for _ in range(20))
    return max(1, round(probe * work_ms / 1000 / best))


def _timed(loops: int) -> float:
    start = time.perf_counter()
    burn(loops)
    return time.perf_counter() - start


def cpu_job(job: pgqueue.Job) -> None:
    burn(job.payload["loops"])


# The worker the processes run: its queue and table come from the environment.
if "BENCH_PROCESSES_TABLE" in os.environ:
    worker = pgqueue.Worker(
        pgqueue.Queue(os.environ["PGQUEUE_DSN"], table=os.environ["BENCH_PROCESSES_TABLE"]),
        {"cpu": cpu_job},
        concurrency=int(os.environ["BENCH_PROCESSES_CONCURRENCY"]),
        batch_size=int(os.environ["BENCH_PROCESSES_BATCH_SIZE"]),
    )


def run(dsn: str, processes: int, jobs: int, loops: int, worker_env: dict[str, str]) -> float:
    """Enqueue ``jobs`` jobs, run them with ``processes`` worker processes; jobs per second."""
    table = f"procbench_{uuid.uuid4().hex[:10]}"
    ident = sql.Identifier(table)
    try:
        with pgqueue.Queue(dsn, table=table) as q:
            q.install()
            q.enqueue_many([("cpu", {"loops": loops}) for _ in range(jobs)])
        env = {**os.environ, **worker_env, "PGQUEUE_DSN": dsn, "BENCH_PROCESSES_TABLE": table}
        command = [
            *(sys.executable, "-m", "pgqueue", "worker", "benchmarks.processes:worker"),
            *("--processes", str(processes), "--until-empty", "--log-level", "WARNING"),
        ]
        marks: dict[float, float] = {}
        with (
            psycopg.connect(dsn, autocommit=True) as conn,
            subprocess.Popen(command, cwd=ROOT, env=env) as proc,
        ):
            count = sql.SQL("SELECT count(*) FROM {}").format(ident)
            while len(marks) < 2 and proc.poll() is None:
                row = conn.execute(count).fetchone()
                left = row[0] if row else 0
                now = time.perf_counter()
                for fraction in (0.1, 0.9):
                    if fraction not in marks and left <= jobs * (1 - fraction):
                        marks[fraction] = now
                time.sleep(0.02)
            if proc.wait(timeout=600) != 0:
                raise RuntimeError(f"the worker exited with status {proc.returncode}")
        return jobs * 0.8 / (marks[0.9] - marks[0.1])
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dsn", default=os.environ.get("PGQUEUE_DSN"), help="default: $PGQUEUE_DSN, else embedded"
    )
    p.add_argument("--jobs", type=int, default=2000, help="jobs per run (default 2,000)")
    p.add_argument("--work-ms", type=float, default=2.0, help="CPU time of one job (default 2)")
    p.add_argument("--repeat", type=int, default=3, help="runs per process count (default 3)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="of each process (default 1: more threads only share the one GIL)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=10,
        help="of each process (default 10: a process that claims far ahead leaves "
        "the other idle at the end)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    from pgqueue.embedded import dsn_or_embedded

    loops = loops_for(args.work_ms)
    worker_env = {
        "BENCH_PROCESSES_CONCURRENCY": str(args.concurrency),
        "BENCH_PROCESSES_BATCH_SIZE": str(args.batch_size),
    }
    rates: dict[int, list[float]] = {1: [], 2: []}
    with dsn_or_embedded(args.dsn) as dsn:
        for i in range(args.repeat):
            for n in rates:
                print(f"run {i + 1}/{args.repeat}: --processes {n}...", file=sys.stderr)
                rates[n].append(run(dsn, n, args.jobs, loops, worker_env))
    medians = {n: statistics.median(r) for n, r in rates.items()}
    if args.json:
        print(json.dumps({"jobs": args.jobs, "work_ms": args.work_ms, "loops": loops,
                          "runs": rates}))  # fmt: skip
        return 0
    print(f"{args.jobs:,} jobs of {args.work_ms:g} ms CPU ({loops:,} loops), "
          f"concurrency {args.concurrency}, batch size {args.batch_size}, "
          f"median of {args.repeat} run(s)")  # fmt: skip
    print(f"{'processes':10} {'jobs/s':>8} {'vs 1':>6}")
    for n, rate in medians.items():
        print(f"{n:<10} {rate:8,.0f} {rate / medians[1]:5.2f}x")
    print(f"runs: {json.dumps(rates)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
