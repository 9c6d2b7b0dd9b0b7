"""The contenders of ``pgqueue bench``: each enqueues and drains N trivial jobs once.

pgqueue's workers (`run_sync`, `run_async`) are measured between two bare
loops that are not products: the seed design as its article wrote it
(`run_seed`, the floor), and the database's limit for pgqueue's schema
(`run_ceiling`). Every run gets a fresh table and drops it afterwards.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import psycopg

from .aio.queue import AsyncQueue
from .aio.worker import AsyncWorker
from .bench_sql import COMMITS, WAL_WRITTEN, SeedStatements
from .core.jobs import Job
from .core.ops import QueueCore
from .sync.driver import run_on
from .sync.queue import Queue
from .sync.worker import Worker

SEED_WORKERS = 4
SEED_BATCH = 20
CEILING_CONNECTIONS = 4


@dataclass
class Run:
    """One enqueue-and-drain of ``jobs`` jobs, and what it cost the server."""

    enqueue_s: float
    drain_s: float
    wal_bytes: int = 0  # WAL written by the enqueue and the drain
    commits: int = 0  # transactions committed meanwhile (the meter's own few included)


class Meter:
    """The WAL a run writes and the transactions it commits, from `start`
    (after the table is installed) to `stop` (once the run's connections are
    closed: a backend reports its commits to the statistics when it ends)."""

    SETTLE = 0.2  # seconds between two reads of the commit count
    PATIENCE = 5.0  # the longest the count is waited for to settle

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._wal = self._commits = 0

    def _read(self, query: bytes) -> int:
        # A new connection each read: a new snapshot of the statistics.
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            ((value,),) = conn.execute(query).fetchall()
            return int(value)

    def start(self) -> None:
        self._wal, self._commits = self._read(WAL_WRITTEN), self._read(COMMITS)

    def stop(self, enqueue_s: float, drain_s: float) -> Run:
        wal = self._read(WAL_WRITTEN) - self._wal
        deadline = time.monotonic() + self.PATIENCE
        commits = self._read(COMMITS)
        while time.monotonic() < deadline:
            time.sleep(self.SETTLE)
            again = self._read(COMMITS)
            if again == commits:
                break
            commits = again
        return Run(enqueue_s, drain_s, wal, commits - self._commits)


class Progress:
    """A one-line progress count on stderr while a drain runs (only on a terminal)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self, _job: Any = None) -> None:
        self.done += 1  # a lost increment under threads only blurs the display

    def advance(self, jobs: int) -> None:
        self.done += jobs

    def _show(self) -> None:
        while not self._stop.wait(0.2):
            width = 30
            filled = int(width * min(self.done, self.total) / self.total)
            bar = "#" * filled + "." * (width - filled)
            sys.stderr.write(f"\r  {self.label:<10} [{bar}] {self.done:>8,}/{self.total:,}")
            sys.stderr.flush()

    def __enter__(self) -> Progress:
        if sys.stderr.isatty():
            self._thread = threading.Thread(target=self._show, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            sys.stderr.write("\r" + " " * 70 + "\r")


def _table() -> str:
    return f"bench_{uuid.uuid4().hex[:10]}"


def _drop(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        run_on(conn, QueueCore(table).uninstall())


def _specs(n: int) -> list[tuple[str, Any]]:
    return [("noop", {"n": i}) for i in range(n)]


# -- pgqueue ---------------------------------------------------------------------


def run_sync(dsn: str, n: int, concurrency: int, batch_size: int, *, history: bool) -> Run:
    table = _table()
    try:
        meter = Meter(dsn)
        with Queue(dsn, table=table, history=history) as q:
            q.install()
            meter.start()
            start = time.perf_counter()
            q.enqueue_many(_specs(n))
            enqueued = time.perf_counter() - start
            with Progress("sync", n) as progress:
                worker = Worker(q, {"noop": progress.tick}, concurrency=concurrency,
                                batch_size=batch_size, handle_signals=False)  # fmt: skip
                start = time.perf_counter()
                worker.run(until_empty=True)
                drained = time.perf_counter() - start
        return meter.stop(enqueued, drained)
    finally:
        _drop(dsn, table)


def run_async(
    dsn: str, n: int, concurrency: int, batch_size: int, backend: str, *, history: bool
) -> Run:
    table = _table()

    meter = Meter(dsn)

    async def main() -> tuple[float, float]:
        async with AsyncQueue(dsn, table=table, history=history) as q:
            await q.install()
            await anyio.to_thread.run_sync(meter.start)
            start = time.perf_counter()
            await q.enqueue_many(_specs(n))
            enqueued = time.perf_counter() - start
            with Progress(backend, n) as progress:

                async def noop(job: Job) -> None:
                    progress.tick()

                worker = AsyncWorker(q, {"noop": noop}, concurrency=concurrency,
                                     batch_size=batch_size, handle_signals=False)  # fmt: skip
                start = time.perf_counter()
                await worker.run(until_empty=True)
                return enqueued, time.perf_counter() - start

    try:
        return meter.stop(*anyio.run(main, backend=backend))
    finally:
        _drop(dsn, table)


# -- the seed design, as its article wrote it -------------------------------------------


def run_seed(dsn: str, n: int) -> Run:
    """Four asyncio workers, batches of 20, one delete statement per job; enqueue by executemany."""
    table = _table()
    seed = SeedStatements(table)

    meter = Meter(dsn)

    async def main() -> tuple[float, float]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for statement in seed.create:
                await conn.execute(statement)
            await anyio.to_thread.run_sync(meter.start)
            start = time.perf_counter()
            async with conn.cursor() as cur, conn.transaction():
                await cur.executemany(
                    seed.insert, [("noop", json.dumps({"n": i})) for i in range(n)]
                )
            enqueued = time.perf_counter() - start

        with Progress("seed", n) as progress:

            async def worker(name: str) -> None:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    while True:
                        cur = await conn.execute(seed.claim, (name, SEED_BATCH))
                        rows = await cur.fetchall()
                        if not rows:
                            return
                        for row in rows:
                            progress.tick()  # the trivial handler
                            await conn.execute(seed.delete, (row[0],))

            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(SEED_WORKERS):
                    tg.start_soon(worker, f"seed-{i}")
            return enqueued, time.perf_counter() - start

    try:
        return meter.stop(*anyio.run(main, backend="asyncio"))
    finally:
        _drop(dsn, table)


# -- the ceiling: the database's limit for this schema -----------------------------------


def run_ceiling(dsn: str, n: int, batch_size: int) -> Run:
    """The queue's claim and one batched DELETE per batch, with nothing else.

    Four threads, each with its own autocommit connection, loop until a
    claim returns nothing: claim ``batch_size`` jobs with the queue's claim
    statement (`Statements.claim_for`, the UPDATE ... FOR UPDATE SKIP LOCKED that
    a worker's turn embeds), then delete them all in one statement. No
    handler runs and no outcome is fenced: it is how fast a worker would
    drain if pgqueue itself cost nothing. Threads with sync connections
    measured a little faster than asyncio with `psycopg.AsyncConnection`; a
    ceiling is more honest the faster it is. Enqueue is `enqueue_many`.
    """
    table = _table()
    # The claim of a worker's turn while no limit is in use (as in this run).
    claim = QueueCore(table).sql.claim_for(False, False, batch_size, limited=False)
    delete = SeedStatements(table).delete_batch

    def drain(conn: psycopg.Connection[Any], name: str, progress: Progress) -> None:
        params = {"worker": name}
        while rows := conn.execute(claim, params).fetchall():
            conn.execute(delete, ([row[0] for row in rows],))
            progress.advance(len(rows))

    meter = Meter(dsn)
    try:
        with Queue(dsn, table=table) as q:
            q.install()
            meter.start()
            start = time.perf_counter()
            q.enqueue_many(_specs(n))
            enqueued = time.perf_counter() - start
        with ExitStack() as stack:
            # Connected before the clock starts, as a worker's pool is.
            conns = [
                stack.enter_context(psycopg.connect(dsn, autocommit=True))
                for _ in range(CEILING_CONNECTIONS)
            ]
            progress = stack.enter_context(Progress("ceiling", n))
            pool = stack.enter_context(ThreadPoolExecutor(CEILING_CONNECTIONS))
            start = time.perf_counter()
            drains = [
                pool.submit(drain, conn, f"ceiling-{i}", progress) for i, conn in enumerate(conns)
            ]
            for done in drains:
                done.result()  # a failed loop fails the run
            drained = time.perf_counter() - start
        return meter.stop(enqueued, drained)
    finally:
        _drop(dsn, table)
