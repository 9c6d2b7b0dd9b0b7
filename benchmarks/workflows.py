"""Workflows: what a group costs beside the same jobs without one.

In each of ``--repeat`` rounds, on one table, two variants take turns (so
that a noisy moment hurts both alike):

* ``plain``: ``--jobs`` no-op jobs with `enqueue_many`, then drained;
* ``group``: the same jobs as ``q.group(*specs, then=...)``: one
  transaction writes them and their ``then`` job, which waits for all of
  them (its dependency rows included); then drained, ``then`` last.

Each variant reports the enqueue time and the drain time: an `AsyncWorker`
(asyncio, defaults: concurrency 4, batch_size 100) from start until it
returns with nothing left (``run(until_empty=True)``). Medians of the
rounds, and the ratio group / plain.

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL with default
settings is started and removed afterwards.

    python benchmarks/workflows.py                 # 1,000 jobs, 5 rounds
    python benchmarks/workflows.py --jobs 10000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from typing import Any

import anyio

import pgqueue
from pgqueue import JobSpec
from pgqueue.embedded import dsn_or_embedded


async def noop(job: pgqueue.Job) -> None:
    pass


async def one_round(q: pgqueue.AsyncQueue, jobs: int, variant: str) -> tuple[float, float]:
    specs = [JobSpec("step", {"n": n}) for n in range(jobs)]
    started = time.perf_counter()
    if variant == "group":
        await q.group(*specs, then=JobSpec("then"))
    else:
        await q.enqueue_many(specs)
    enqueued = time.perf_counter()
    worker = pgqueue.AsyncWorker(q, {"step": noop, "then": noop})
    await worker.run(until_empty=True)
    drained = time.perf_counter()
    left = (await q.stats()).by_status
    if any(left.values()):
        raise RuntimeError(f"{variant}: jobs left after the drain: {left}")
    return enqueued - started, drained - enqueued


async def main(dsn: str, jobs: int, repeat: int) -> dict[str, Any]:
    table = f"bench_workflows_{uuid.uuid4().hex[:8]}"
    times: dict[str, list[tuple[float, float]]] = {"plain": [], "group": []}
    async with pgqueue.AsyncQueue(dsn, table=table) as q:
        await q.install()
        try:
            await one_round(q, 100, "group")  # warm-up: prepared statements, caches
            for n in range(repeat):
                order = ["plain", "group"] if n % 2 == 0 else ["group", "plain"]
                for variant in order:
                    times[variant].append(await one_round(q, jobs, variant))
        finally:
            await q.uninstall()
    return {
        variant: {
            "enqueue_s": statistics.median(e for e, _ in runs),
            "drain_s": statistics.median(d for _, d in runs),
        }
        for variant, runs in times.items()
    }


def report(result: dict[str, Any], jobs: int, repeat: int) -> None:
    print(f"{jobs:,} no-op jobs, asyncio AsyncWorker (defaults); median of {repeat}\n")
    print(f"{'variant':<8}{'enqueue ms':>12}{'drain s':>10}{'drain jobs/s':>14}")
    for variant, r in result.items():
        rate = jobs / r["drain_s"]
        print(f"{variant:<8}{r['enqueue_s'] * 1000:>12.1f}{r['drain_s']:>10.3f}{rate:>14,.0f}")
    plain, group = result["plain"], result["group"]
    print(
        f"\ngroup / plain: enqueue {group['enqueue_s'] / plain['enqueue_s']:.2f}x the time, "
        f"drain {group['drain_s'] / plain['drain_s']:.2f}x the time"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_DSN"))
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with dsn_or_embedded(args.dsn) as dsn:
        result = anyio.run(main, dsn, args.jobs, args.repeat)
    report(result, args.jobs, args.repeat)
