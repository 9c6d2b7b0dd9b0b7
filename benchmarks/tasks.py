"""What a task costs at enqueue, beside `Queue.enqueue` with the same payload.

A task binds its arguments against the function's signature and walks them
to check that JSON carries them unchanged, before the queue validates and
writes the job as usual. Each run enqueues into a fresh table, variants
taking turns within each repeat so that noise on the machine is shared:

* ``enqueue``: ``--jobs`` calls of ``q.enqueue("k", {"args": [i], ...})``,
  each committed by the queue;
* ``task``: ``--jobs`` calls of ``task.enqueue(i)``, the same rows;
* ``enqueue_many`` / ``task many``: one batch of ``--batch`` jobs
  (``COPY``), from ``(kind, payload)`` tuples and from ``task.enqueue_many``.

``--payload-lines N`` adds a list of N small dicts to every call (the
check walks it in Python). The median of ``--repeat`` runs is printed per
variant, in jobs per second, with its ratio to its plain twin, and then
the CPU time per job of the task's checks and of the queue's validation,
with no database (best of 5: robust on a busy machine, where the rates
are not).

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards; tables are always dropped.

    python benchmarks/tasks.py
    python benchmarks/tasks.py --jobs 5000 --batch 50000 --payload-lines 100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import timeit
import uuid
from typing import Any

import pgqueue
from pgqueue.core.jobs import validate_specs
from pgqueue.core.tasks import TaskDefinition
from pgqueue.embedded import dsn_or_embedded

VARIANTS = ("enqueue", "task", "enqueue_many", "task many")
TWIN = {"enqueue": "enqueue", "task": "enqueue", "enqueue_many": "enqueue_many",
        "task many": "enqueue_many"}  # fmt: skip


def run(dsn: str, variant: str, jobs: int, batch: int, lines: list[dict[str, Any]]) -> float:
    """Enqueue with one variant into a fresh table; return jobs per second."""
    table = f"taskbench_{uuid.uuid4().hex[:10]}"
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        try:
            return _timed(q, variant, jobs, batch, lines)
        finally:
            q.uninstall()


def _timed(
    q: pgqueue.Queue, variant: str, jobs: int, batch: int, lines: list[dict[str, Any]]
) -> float:
    @q.task(kind="k")
    def order(order_id: int, lines: list[dict[str, Any]]) -> None: ...

    start = time.perf_counter()
    if variant == "enqueue":
        for i in range(jobs):
            q.enqueue("k", {"args": [i, lines], "kwargs": {}})
    elif variant == "task":
        for i in range(jobs):
            order.enqueue(i, lines)
    elif variant == "enqueue_many":
        q.enqueue_many([("k", {"args": [i, lines], "kwargs": {}}) for i in range(batch)])
    else:
        order.enqueue_many([(i, lines) for i in range(batch)])
    return (jobs if variant in ("enqueue", "task") else batch) / (time.perf_counter() - start)


def cpu_costs(lines: list[dict[str, Any]], calls: int = 20_000) -> dict[str, float]:
    """Microseconds per call, best of 5, with no database: a task's binding and
    checks (`Task.spec`), and the queue's validation of the same job."""
    definition = TaskDefinition(_order, "k", {})
    specs = [definition.spec(definition.options, (i, lines), {}) for i in range(calls)]

    def best(fn: Any) -> float:
        return min(timeit.repeat(fn, number=1, repeat=5)) / calls * 1e6

    return {
        "task checks": best(lambda: [definition.spec(definition.options, (i, lines), {})
                                     for i in range(calls)]),
        "queue validation": best(lambda: validate_specs(specs)),
    }  # fmt: skip


def _order(order_id: int, lines: list[dict[str, Any]]) -> None: ...


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dsn", default=os.environ.get("PGQUEUE_DSN"), help="default: $PGQUEUE_DSN, else embedded"
    )
    p.add_argument("--jobs", type=int, default=3_000, help="single enqueues per run (3,000)")
    p.add_argument("--batch", type=int, default=20_000, help="jobs per enqueue_many (20,000)")
    p.add_argument("--payload-lines", type=int, default=0, help="dicts in each call's list (0)")
    p.add_argument("--repeat", type=int, default=3, help="runs per variant (default 3)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args(argv)
    lines = [{"sku": f"sku-{i}", "qty": i, "price": 9.5} for i in range(args.payload_lines)]
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with dsn_or_embedded(args.dsn) as dsn:
        for i in range(args.repeat):
            for name in VARIANTS:
                print(f"run {i + 1}/{args.repeat}: {name}...", file=sys.stderr)
                rates[name].append(run(dsn, name, args.jobs, args.batch, lines))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    cpu = cpu_costs(lines)
    if args.json:
        print(json.dumps({"jobs": args.jobs, "batch": args.batch, "cpu_us": cpu,
                          "payload_lines": args.payload_lines, "runs": rates}))  # fmt: skip
        return 0
    print(f"{args.jobs:,} single enqueues, batches of {args.batch:,}, "
          f"{args.payload_lines} payload lines, median of {args.repeat} run(s)")  # fmt: skip
    print(f"{'variant':14} {'jobs/s':>9} {'vs plain':>9}")
    for name, rate in medians.items():
        print(f"{name:14} {rate:9,.0f} {rate / medians[TWIN[name]]:8.2f}x")
    print("CPU per job, no database (best of 5): "
          + ", ".join(f"{name} {us:.1f} us" for name, us in cpu.items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
