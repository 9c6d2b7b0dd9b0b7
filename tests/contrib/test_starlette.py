"""pgqueue.contrib.starlette: the queue and a worker live as long as a Starlette/FastAPI app,
on asyncio and trio, and leave SIGINT and SIGTERM to the server."""

from __future__ import annotations

import signal
import threading
from typing import Annotated, Any, Literal

import anyio
import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

import pgqueue
from pgqueue.contrib.starlette import get_queue, lifespan, running

from ..conftest import Raw

LOOPS = ["asyncio", "trio"]


@pytest.fixture(params=LOOPS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


QueueDep = Annotated[pgqueue.AsyncQueue, Depends(get_queue)]


@pytest.mark.parametrize("loop", LOOPS)
def test_app_enqueues_through_the_dependency_and_its_lifespan_worker_runs_the_job(
    dsn: str, table: str, raw: Raw, loop: Literal["asyncio", "trio"]
) -> None:
    queue = pgqueue.AsyncQueue(dsn, table=table)
    worker = pgqueue.AsyncWorker(queue, concurrency=2)
    greeted: list[str] = []
    done = threading.Event()  # set on the app's event loop thread, awaited by the test's

    @worker.handler("greet")
    async def greet(job: pgqueue.Job) -> None:
        greeted.append(job.payload["name"])
        done.set()

    app = FastAPI(lifespan=lifespan(queue, worker=worker, install=True))

    @app.post("/greet/{name}")
    async def post_greet(name: str, queue: QueueDep) -> dict[str, int]:
        return {"job_id": await queue.enqueue("greet", {"name": name})}

    with TestClient(app, backend=loop) as client:
        response = client.post("/greet/ann")
        assert response.status_code == 200
        job_id = response.json()["job_id"]
        assert done.wait(timeout=60), "the lifespan's worker did not run the job"
    assert greeted == ["ann"]
    assert raw.count("id = %s", job_id) == 0  # its success was recorded before shutdown ended


def test_dependency_without_the_lifespan_says_how_to_start_the_app() -> None:
    app = FastAPI()

    @app.get("/stats")
    async def stats(queue: QueueDep) -> dict[str, Any]:  # pragma: no cover - never reached
        return {}

    with TestClient(app) as client, pytest.raises(RuntimeError, match="lifespan="):
        client.get("/stats")


@pytest.mark.anyio
async def test_leaving_running_lets_the_running_job_finish_then_closes_and_keeps_signals(
    dsn: str, table: str, raw: Raw
) -> None:
    queue = pgqueue.AsyncQueue(dsn, table=table)
    worker = pgqueue.AsyncWorker(queue)  # handle_signals=True: running() overrides it
    started, release = anyio.Event(), anyio.Event()
    finished: list[int] = []

    @worker.handler("slow")
    async def slow(job: pgqueue.Job) -> None:
        started.set()
        await release.wait()  # a cancelled worker would be interrupted here
        finished.append(job.id)

    handlers_before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    async with running(queue, worker=worker, install=True) as opened:
        assert opened is queue
        job_id = await queue.enqueue("slow")
        with anyio.fail_after(60):
            await started.wait()
        # The worker runs in the main thread and still left the signals alone.
        assert threading.current_thread() is threading.main_thread()
        assert {sig: signal.getsignal(sig) for sig in handlers_before} == handlers_before
        release.set()
    # Leaving the block stopped the worker gracefully: the job finished and was recorded.
    assert finished == [job_id]
    assert raw.count() == 0


@pytest.mark.anyio
async def test_a_worker_of_another_queue_is_refused(dsn: str, table: str) -> None:
    queue = pgqueue.AsyncQueue(dsn, table=table)
    other = pgqueue.AsyncWorker(pgqueue.AsyncQueue(dsn, table=table))
    with pytest.raises(ValueError, match="built on the queue"):
        async with running(queue, worker=other):
            pass  # pragma: no cover - never reached


class BrokenWorker(pgqueue.AsyncWorker):
    """A worker with a bug: its run raises."""

    async def run(self, *, until_empty: bool = False, handle_signals: bool | None = None) -> None:
        raise RuntimeError("a bug in the worker")


@pytest.mark.anyio
async def test_a_failing_worker_is_logged_and_the_queue_keeps_serving(
    dsn: str, table: str, raw: Raw, caplog: pytest.LogCaptureFixture
) -> None:
    queue = pgqueue.AsyncQueue(dsn, table=table)
    worker = BrokenWorker(queue)
    async with running(queue, worker=worker, install=True):
        await anyio.wait_all_tasks_blocked()  # the worker's task has run, and failed
        job_id = await queue.enqueue("send_receipt")
    assert raw.count("id = %s", job_id) == 1
    [record] = [r for r in caplog.records if r.name == "pgqueue.worker"]
    assert record.levelname == "ERROR"
    assert "the app keeps serving without it" in record.getMessage()
    assert record.exc_info is not None and "a bug in the worker" in str(record.exc_info[1])
