"""pgqueue in a Starlette or FastAPI app: the queue and a worker live as long as the app.

    queue = pgqueue.AsyncQueue(DSN)
    worker = pgqueue.AsyncWorker(queue, concurrency=4)
    app = FastAPI(lifespan=pgqueue.contrib.starlette.lifespan(queue, worker=worker))

    @app.post("/orders")
    async def create_order(queue: Annotated[pgqueue.AsyncQueue, Depends(get_queue)]) -> ...:
        ...

`lifespan` opens the queue when the server starts the app, runs the worker
beside the app (on the server's event loop, asyncio or trio) without
touching SIGINT or SIGTERM, which stay the server's, and on shutdown stops
the worker gracefully and closes the queue. `running` is the same for an
app that writes its own lifespan. See docs/frameworks.md.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
from starlette.requests import HTTPConnection

from ..aio.queue import AsyncQueue
from ..aio.worker import AsyncWorker

__all__ = ["STATE_KEY", "get_queue", "lifespan", "running"]

log = logging.getLogger("pgqueue.worker")

STATE_KEY = "pgqueue"
"""The key of the queue in the lifespan state (``request.state.pgqueue``)."""


@asynccontextmanager
async def running(
    queue: AsyncQueue, *, worker: AsyncWorker | None = None, install: bool = False
) -> AsyncIterator[AsyncQueue]:
    """Open ``queue`` (and `AsyncQueue.install` it with ``install``), run
    ``worker`` in a task until the block ends, then stop it and close the queue.

        @asynccontextmanager
        async def app_lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
            async with engine_started(), running(queue, worker=worker):
                yield {"pgqueue": queue}

    The queue is opened before the block starts: a server that cannot be
    reached fails the app's start-up with its reason (`psycopg.OperationalError`;
    `psycopg_pool.PoolTimeout` for a queue on a pool of yours). The
    worker runs in a task group of its own on the caller's event loop and
    never installs signal handlers (the web server owns SIGINT and SIGTERM
    and ends the block). When the block ends, the worker stops as
    `AsyncWorker.stop` does: it claims nothing more, hands back jobs it has
    not started, and waits up to its ``grace_period`` for running ones. If
    the block raises, the worker is cancelled instead: its running jobs
    come back through their leases. The queue is closed last (a pool you
    gave it stays open). Should the worker itself raise, the error is
    logged (``pgqueue.worker``, ERROR) and the block goes on without it:
    the app keeps serving and enqueueing.
    """
    if worker is not None and worker.queue is not queue:
        raise ValueError("the worker must be built on the queue it runs with: AsyncWorker(queue)")
    await queue.open()
    try:
        if install:
            await queue.install()
        async with anyio.create_task_group() as tg:
            if worker is not None:
                tg.start_soon(_serve, worker)
            try:
                yield queue
            finally:
                if worker is not None:
                    worker.stop()
    finally:
        with anyio.CancelScope(shield=True):
            await queue.close()


async def _serve(worker: AsyncWorker) -> None:
    try:
        await worker.run(handle_signals=False)
    except Exception:
        # A bug (the worker retries database errors, and a handler's error fails
        # its job): the app and its queue keep serving, the jobs wait for a worker.
        log.exception("worker %s failed; the app keeps serving without it", worker.name)


def lifespan(
    queue: AsyncQueue, *, worker: AsyncWorker | None = None, install: bool = False
) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """A lifespan for ``Starlette(lifespan=...)`` or ``FastAPI(lifespan=...)``
    that runs `running` around the app and puts the queue in its state.

    Requests find the queue as ``request.state.pgqueue`` or through the
    `get_queue` dependency. The server must support lifespan state (uvicorn
    and hypercorn do, as do Starlette's and FastAPI's ``TestClient``).
    """

    @asynccontextmanager
    async def app_lifespan(app: Any) -> AsyncIterator[dict[str, Any]]:
        async with running(queue, worker=worker, install=install):
            yield {STATE_KEY: queue}

    return app_lifespan


def get_queue(request: HTTPConnection) -> AsyncQueue:
    """The app's queue, from the lifespan state: a FastAPI dependency.

        QueueDep = Annotated[pgqueue.AsyncQueue, Depends(get_queue)]

        @app.post("/orders")
        async def create_order(queue: QueueDep) -> dict[str, int]:
            return {"job_id": await queue.enqueue("send_receipt", {"order_id": 7})}

    Raises `RuntimeError` when the app was not started by `lifespan` (or
    by a lifespan of its own that yields ``{"pgqueue": queue}``).
    """
    queue = getattr(request.state, STATE_KEY, None)
    if not isinstance(queue, AsyncQueue):
        raise RuntimeError(
            "no pgqueue.AsyncQueue in the app's lifespan state: start the app with "
            "lifespan=pgqueue.contrib.starlette.lifespan(queue), or yield "
            f"{{{STATE_KEY!r}: queue}} from a lifespan of your own"
        )
    return queue
