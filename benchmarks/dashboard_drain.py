"""Does a dashboard refreshing every second slow a worker down?

A table is filled with ``--dead`` dead jobs (default 1,000), then
``--jobs`` ready ones (default 1,000,000). A `pgqueue.Worker` (its own process, default
settings, a no-op handler) drains it, and its drain rate is measured in
windows of ``--window`` seconds, alternately with no dashboard and with a
dashboard process that loads the overview and the dead jobs page once a
second each (two browser tabs refreshing every second). The verdict
compares the medians of the two kinds of window, measured in the same run
on the same, shrinking, table, in the order off, on, on, off, off, on ...;
it also gives the median ratio of neighbouring windows.

The dashboard runs in-process behind its WSGI app (no HTTP server: what is
measured is what it costs the database and the machine), with the
statement timeout and autocommit of every dashboard.

    python benchmarks/dashboard_drain.py                  # 1M jobs
    python benchmarks/dashboard_drain.py --jobs 300000 --window 5

It stops before a pair of windows that the backlog would not last through.

With no ``--dsn`` (or ``PGQUEUE_DSN``) an embedded PostgreSQL is started;
the table is dropped afterwards.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import threading
import time
import uuid
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event

import psycopg
from psycopg import sql

import pgqueue
from pgqueue.embedded import dsn_or_embedded


def fill(dsn: str, table: str, jobs: int, dead: int) -> None:
    with pgqueue.Queue(dsn, table=table) as q:
        q.install()
        # The dead jobs first: old failures under a newer backlog, the case
        # where finding them by reading the table costs most.
        for i in range(dead):
            q.enqueue("doomed", {"n": i}, max_attempts=1)
        for job in q.claim(dead, worker="bench-dead", kinds=["doomed"]):
            q.fail(job, "failed on purpose")
        for start in range(0, jobs, 50_000):
            n = min(50_000, jobs - start)
            q.enqueue_many([("noop", {"n": start + i}) for i in range(n)])
    # Fresh statistics, as autovacuum would make them on a table this big.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))


def work(dsn: str, table: str, done: Synchronized[int], stop: Event) -> None:
    def count(event: pgqueue.JobEvent) -> None:
        if event.name == "succeeded":
            with done.get_lock():
                done.value += 1

    with pgqueue.Queue(dsn, table=table) as q:
        worker = pgqueue.Worker(q, {"noop": lambda job: None}, kinds=["noop"], on_event=count)
        threading.Thread(target=lambda: (stop.wait(), worker.stop()), daemon=True).start()
        worker.run()


def watch(
    dsn: str,
    table: str,
    on: Event,
    stop: Event,
    loads: Synchronized[int],
    busy: Synchronized[float],
) -> None:
    from werkzeug.test import Client

    from pgqueue.web import Dashboard

    with Dashboard(dsn, table=table, authorize=lambda request: "read") as dashboard:
        client = Client(dashboard.wsgi)
        while not stop.is_set():
            if not on.wait(0.2):
                continue
            tick = time.monotonic()
            for path in ("/", "/dead"):
                started = time.perf_counter()
                response = client.get(path)
                if response.status_code != 200:
                    raise RuntimeError(f"{path}: {response.status_code} {response.get_data()!r}")
                with loads.get_lock():
                    loads.value += 1
                    busy.value += time.perf_counter() - started
            stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=os.environ.get("PGQUEUE_DSN"))
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=1_000)
    parser.add_argument("--window", type=float, default=8.0, help="seconds per window")
    parser.add_argument("--pairs", type=int, default=6, help="windows of each kind, at most")
    args = parser.parse_args()
    table = f"bench_dash_{uuid.uuid4().hex[:8]}"
    ctx = mp.get_context("spawn")
    with dsn_or_embedded(args.dsn) as dsn:
        try:
            started = time.monotonic()
            fill(dsn, table, args.jobs, args.dead)
            print(f"filled {args.jobs:,} ready and {args.dead:,} dead jobs "
                  f"in {time.monotonic() - started:.0f} s")  # fmt: skip
            done = ctx.Value("q", 0)
            loads = ctx.Value("q", 0)
            busy = ctx.Value("d", 0.0)  # seconds spent loading pages
            stop, on = ctx.Event(), ctx.Event()
            worker = ctx.Process(target=work, args=(dsn, table, done, stop))
            watcher = ctx.Process(target=watch, args=(dsn, table, on, stop, loads, busy))
            worker.start()
            watcher.start()
            try:
                time.sleep(args.window)  # warm-up: connections, caches
                rates: dict[bool, list[float]] = {False: [], True: []}
                for i in range(2 * args.pairs):
                    # off, on, on, off, off, on ...: a drift in the drain rate over
                    # the run (the table shrinks, autovacuum comes and goes) falls
                    # on both kinds of window alike.
                    watched = i % 4 in (1, 2)
                    left = args.jobs - done.value
                    last = max(rates[True] + rates[False], default=0.0)
                    if not watched and left < 2.5 * last * args.window:
                        print("stopping early: the backlog would run out within the next pair")
                        break
                    (on.set if watched else on.clear)()
                    time.sleep(1.0)  # a page load under way when the dashboard went off ends
                    before, t0, pages0, busy0 = (
                        done.value,
                        time.monotonic(),
                        loads.value,
                        busy.value,
                    )
                    time.sleep(args.window)
                    rate = (done.value - before) / (time.monotonic() - t0)
                    rates[watched].append(rate)
                    pages = loads.value - pages0
                    spent = (busy.value - busy0) / (time.monotonic() - t0)
                    state = "on " if watched else "off"
                    line = (
                        f"window {i + 1:2}: dashboard {state} {rate:8.0f} jobs/s  ({pages} pages "
                    )
                    line += f"loaded, {1000 * spent:.0f} ms a second spent loading them)"
                    print(line, flush=True)
            finally:
                stop.set()
                on.set()
                worker.join(60)
                watcher.join(60)
            quiet, watched_ = statistics.median(rates[False]), statistics.median(rates[True])
            print(f"median drain: {quiet:.0f} jobs/s without the dashboard, {watched_:.0f} jobs/s "
                  f"with it: {100 * (watched_ / quiet - 1):+.1f}%")  # fmt: skip
            # Each window with the dashboard beside the window without it next to it.
            ratios = [a / b for a, b in zip(rates[True], rates[False], strict=False) if b]
            if ratios:
                print(f"median of the {len(ratios)} neighbouring pairs' ratios: "
                      f"{100 * (statistics.median(ratios) - 1):+.1f}%")  # fmt: skip
            print(f"jobs left: {args.jobs - done.value:,}")
        finally:
            with pgqueue.Queue(dsn, table=table) as q:
                q.uninstall()


if __name__ == "__main__":
    main()
