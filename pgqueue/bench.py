"""``pgqueue bench``: enqueue and drain N trivial jobs on each backend, beside the seed design.

With no DSN it starts an embedded PostgreSQL (the ``embedded`` extra) with
default settings; ``--dsn`` or ``PGQUEUE_DSN`` points it at another server.
Each contender gets a fresh table; every figure is the median of
``--repeat`` runs, taken in turns so that a noisy moment hurts all alike.

Two bare loops, not products, frame pgqueue's workers on the same server in
the same run: the seed design, and the ``ceiling`` (the worker's own claim
statement and one batched DELETE per batch, on four connections: the
database's limit for this schema). Every drain rate is shown as a ratio to
both. A backend whose package is not installed (trio) is skipped, with a
note.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .bench_contenders import (
    CEILING_CONNECTIONS,
    SEED_BATCH,
    SEED_WORKERS,
    Run,
    run_async,
    run_ceiling,
    run_seed,
    run_sync,
)
from .core.worker import WorkerSettings
from .embedded import dsn_or_embedded

BACKENDS = ("sync", "asyncio", "trio")
# The package a backend needs beyond pgqueue's own dependencies.
BACKEND_PACKAGES = {"trio": "trio"}


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

    @property
    def wal_per_job(self) -> float:
        """WAL bytes written per job, to enqueue and drain it."""
        return statistics.median(r.wal_bytes for r in self.runs) / self.jobs

    @property
    def commits_per_job(self) -> float:
        return statistics.median(r.commits for r in self.runs) / self.jobs


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module whose __spec__ is None
        return False


def missing_backends(backends: list[str]) -> dict[str, str]:
    """Why each of ``backends`` cannot run here (its package is not installed), by name."""
    return {
        backend: f"the {package} package is not installed (pip install {package})"
        for backend in backends
        if (package := BACKEND_PACKAGES.get(backend)) and not _installed(package)
    }


# -- the command -----------------------------------------------------------------------


def describe_server(dsn: str | None) -> str:
    if dsn:
        return "the server at --dsn / PGQUEUE_DSN"
    return "an embedded PostgreSQL (default settings)"


def measure(args: argparse.Namespace, dsn: str) -> dict[str, Result]:
    """Run every contender ``args.repeat`` times, in turns; their results, in table order."""
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
    plan.append(("ceiling", lambda: run_ceiling(dsn, args.jobs, args.batch_size)))
    results = {name: Result(name, args.jobs) for name, _ in plan}
    # Interleave the repeats so that a noisy moment hurts every contender alike.
    for repeat in range(args.repeat):
        for name, run in plan:
            if not args.json:
                print(f"run {repeat + 1}/{args.repeat}: {name}...", file=sys.stderr)
            results[name].runs.append(run())
    return results


def report(results: dict[str, Result], args: argparse.Namespace, where: str) -> str:
    """The results as a table, with the settings that produced them."""
    seed, ceiling = results["seed"], results["ceiling"]
    lines = [
        f"pgqueue bench: {args.jobs:,} trivial jobs, median of {args.repeat} run(s), on {where}",
        f"pgqueue workers: concurrency={args.concurrency}, batch_size={args.batch_size}"
        f"{', history on' if args.history else ''}",
        f"seed design: {SEED_WORKERS} workers, batches of {SEED_BATCH}, one delete per job "
        "(the design article pgqueue started from: docs/performance.md#pgqueue-bench)",
        f"ceiling: {CEILING_CONNECTIONS} connections, the worker's claim of {args.batch_size}, "
        "one delete per batch, no handler (the database's limit, not a product)",
        "",
        f"{'backend':<10}{'enqueue s':>11}{'drain s':>10}{'jobs/s':>10}{'vs seed':>9}"
        f"{'vs ceiling':>12}{'WAL B/job':>11}{'commits/job':>13}",
    ]
    for name, r in results.items():
        lines.append(
            f"{name:<10}{r.enqueue_s:>11.3f}{r.drain_s:>10.3f}{r.rate:>10,.0f}"
            f"{r.rate / seed.rate:>8.1f}x{r.rate / ceiling.rate:>11.2f}x"
            f"{r.wal_per_job:>11,.0f}{r.commits_per_job:>13.3f}"
        )
    lines += [
        "",
        "WAL B/job: WAL written to enqueue and drain one job (pg_current_wal_insert_lsn); "
        "commits/job: transactions committed on the database meanwhile (pg_stat_database)",
    ]
    # Every contender but the seed enqueues with enqueue_many.
    pg_enqueue = min(r.enqueue_s for n, r in results.items() if n != "seed")
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
        help=f"claim batch of the workers and the ceiling (default {WorkerSettings.batch_size})",
    )
    p.add_argument(
        "--backend",
        action="append",
        choices=BACKENDS,
        help="a backend to run (repeatable; default: all three, trio if installed)",
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
    requested = args.backend or list(BACKENDS)
    # Before any run: a missing package would otherwise fail the bench midway.
    skipped = missing_backends(requested)
    for backend, why in skipped.items():
        print(f"{backend}: skipped, {why}", file=sys.stderr)
    args.backend = [b for b in requested if b not in skipped]
    where = describe_server(args.dsn)
    with dsn_or_embedded(args.dsn) as dsn:
        results = measure(args, dsn)
    if args.json:
        seed, ceiling = results["seed"], results["ceiling"]
        print(
            json.dumps(
                {
                    "jobs": args.jobs,
                    "repeat": args.repeat,
                    "concurrency": args.concurrency,
                    "batch_size": args.batch_size,
                    "server": where,
                    "skipped": skipped,
                    "results": {
                        name: {
                            "enqueue_s": r.enqueue_s,
                            "drain_s": r.drain_s,
                            "jobs_per_s": r.rate,
                            "ratio_to_seed": r.rate / seed.rate,
                            "ratio_to_ceiling": r.rate / ceiling.rate,
                            "wal_bytes_per_job": r.wal_per_job,
                            "commits_per_job": r.commits_per_job,
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
