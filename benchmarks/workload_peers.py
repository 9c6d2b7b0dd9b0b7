"""One run of one case on a peer, in the peers' own venv: ``workload.py`` runs it.

    python workload_peers.py {pgqueuer|procrastinate} {def|async} CASE DSN [--smoke]

prints the run (`workload_kit.Tracker.result`) as JSON. The database at DSN
is a fresh one that the caller drops afterwards: each peer installs its
schema there with its own API. As for pgqueue, the jobs of a throughput
case are enqueued before the worker starts, and a burst case's jobs by a
producer thread on a connection of its own while it runs. Each peer is
used as its documentation shows, on asyncio:

* pgqueuer: ``PgQueuer`` on an ``AsyncpgDriver`` (one asyncpg connection,
  as its README starts; its psycopg driver holds its one connection while
  it waits up to 1 s for a NOTIFY, which held a try of the uniform case to
  8 jobs/s here), its queue manager run with ``max_concurrent_tasks`` = the
  case's concurrency and ``batch_size`` half of it (the most it allows);
  entrypoints are ``async def`` only (plain functions are refused);
* procrastinate: an `App` on a `PsycopgConnector`,
  ``run_worker_async(concurrency=...)``; plain tasks run in threads.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import Any

from workload_kit import KIND, Case, Tracker, make_cases, produce_bursts

Enqueue = Callable[[list[int]], Coroutine[Any, Any, object]]


async def serve(
    case: Case,
    tracker: Tracker,
    worker: Awaitable[None],
    producer_session: Callable[[], AbstractAsyncContextManager[Enqueue]],
) -> None:
    """Run ``worker`` (stopped by ``tracker.on_done``) and, for bursts, a
    producer thread, with its own event loop and connection (``producer_session``)."""
    producer: threading.Thread | None = None
    failed: list[BaseException] = []
    if case.burst_size:

        def produce() -> None:
            try:
                with asyncio.Runner() as runner:
                    session = producer_session()
                    enqueue = runner.run(session.__aenter__())
                    try:
                        produce_bursts(case, lambda ns: runner.run(enqueue(ns)), tracker)
                    finally:
                        runner.run(session.__aexit__(None, None, None))
            except BaseException as exc:
                failed.append(exc)
                tracker.on_done()

        producer = threading.Thread(target=produce, name="workload-producer")
        producer.start()
    try:
        await worker
    finally:
        if producer is not None:
            producer.join()
    if failed:
        raise failed[0]


# -- pgqueuer --------------------------------------------------------------------------


async def run_pgqueuer(case: Case, handler: str, dsn: str) -> dict[str, Any]:
    import asyncpg
    from pgqueuer import AsyncpgDriver, PgQueuer
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries
    from psycopg.conninfo import conninfo_to_dict

    if handler != "async":
        raise SystemExit("pgqueuer runs async def entrypoints only")
    params = conninfo_to_dict(dsn)
    if "dbname" in params:
        params["database"] = params.pop("dbname")

    async def enqueue(queries: Queries, numbers: list[int]) -> None:
        await queries.enqueue(
            [KIND] * len(numbers), [str(n).encode() for n in numbers], [0] * len(numbers)
        )

    conn = await asyncpg.connect(**params)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        if not case.burst_size:
            await enqueue(queries, list(range(case.jobs)))
    finally:
        await conn.close()
    conn = await asyncpg.connect(**params)
    try:
        pgq = PgQueuer(AsyncpgDriver(conn))
        loop = asyncio.get_running_loop()
        tracker = Tracker(case.jobs, lambda: loop.call_soon_threadsafe(pgq.shutdown.set))

        @pgq.entrypoint(KIND)
        async def work(job: Job) -> None:
            n = int(job.payload or b"0")
            tracker.start(n)
            try:
                await asyncio.sleep(case.duration(n))
            finally:
                tracker.end(n)

        @asynccontextmanager
        async def producer_session() -> AsyncIterator[Enqueue]:
            producer_conn = await asyncpg.connect(**params)
            try:
                producer_queries = Queries(AsyncpgDriver(producer_conn))
                yield lambda numbers: enqueue(producer_queries, numbers)
            finally:
                await producer_conn.close()

        concurrency = case.concurrency
        worker = pgq.qm.run(batch_size=max(1, concurrency // 2), max_concurrent_tasks=concurrency)
        await serve(case, tracker, worker, producer_session)
    finally:
        await conn.close()
    return tracker.result()


# -- procrastinate ---------------------------------------------------------------------


async def run_procrastinate(case: Case, handler: str, dsn: str) -> dict[str, Any]:
    import procrastinate

    def make_app() -> procrastinate.App:
        return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    app = make_app()
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    tracker = Tracker(case.jobs, lambda: loop.call_soon_threadsafe(done.set))

    if handler == "async":

        async def work(n: int) -> None:
            tracker.start(n)
            try:
                await asyncio.sleep(case.duration(n))
            finally:
                tracker.end(n)

    else:

        def work(n: int) -> None:  # type: ignore[misc]
            tracker.start(n)
            try:
                time.sleep(case.duration(n))
            finally:
                tracker.end(n)

    task = app.task(name=KIND)(work)

    @asynccontextmanager
    async def producer_session() -> AsyncIterator[Enqueue]:
        producer_app = make_app()
        producer_task = producer_app.task(name=KIND)(work)
        async with producer_app.open_async():
            yield lambda numbers: producer_task.batch_defer_async(*({"n": n} for n in numbers))

    async def worker() -> None:
        running = asyncio.create_task(
            app.run_worker_async(concurrency=case.concurrency, install_signal_handlers=False)
        )
        await done.wait()
        running.cancel()  # the worker then stops gracefully: running jobs finish
        with suppress(asyncio.CancelledError):
            await running

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        if not case.burst_size:
            await task.batch_defer_async(*({"n": n} for n in range(case.jobs)))
        await serve(case, tracker, worker(), producer_session)
    return tracker.result()


PEERS = {"pgqueuer": run_pgqueuer, "procrastinate": run_procrastinate}


def main(argv: list[str]) -> int:
    peer, handler, name, dsn, *smoke = argv
    case = make_cases(smoke=smoke == ["--smoke"])[name]
    result = asyncio.run(PEERS[peer](case, handler, dsn))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
