"""``pgqueue worker TARGET``: load a worker, apply the options, run it until it stops."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.util
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import anyio
import psycopg.errors

from ..aio.queue import AsyncQueue
from ..aio.worker import AsyncWorker
from ..core.health import HealthReport, assess
from ..sync.queue import Queue
from ..sync.worker import Worker
from .errors import UsageError, not_migrated
from .probes import HttpOptions, WSGIApp, serve_endpoints

# The name docs/observability.md gives the command's logger, whichever module logs.
log = logging.getLogger("pgqueue.cli")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_worker(args: argparse.Namespace) -> int:
    """``pgqueue worker TARGET``."""
    logging.basicConfig(level=args.log_level, format=LOG_FORMAT, stream=sys.stderr)
    if args.trio and importlib.util.find_spec("trio") is None:
        raise UsageError("--trio needs trio installed: pip install trio")
    build = functools.partial(load_worker, args.target, dsn=args.dsn, **worker_settings(args))
    if args.processes is not None:
        from .processes import supervise

        return supervise(build, processes=args.processes,
                         max_jobs_per_child=args.max_jobs_per_child, trio=args.trio,
                         until_empty=args.until_empty, http=http_options(args),
                         log_level=args.log_level)  # fmt: skip
    if args.max_jobs_per_child is not None:
        raise UsageError("--max-jobs-per-child needs --processes")
    worker = build()
    if args.trio and isinstance(worker, Worker):
        raise UsageError("--trio runs an AsyncWorker; a pgqueue.Worker runs on threads")
    stamps = worker.health
    close = serve_http(worker, http_options(args), lambda: assess([stamps]))
    try:
        status = serve(worker, trio=args.trio, until_empty=args.until_empty)
    finally:
        close()
    if status == 0:
        leave_stuck_calls_behind()
    return status


# The worker's settings that ``pgqueue worker`` takes as flags (the spelling
# of each: its name with dashes), each overriding the target's own.
WORKER_SETTINGS = (
    "concurrency",
    "batch_size",
    "kinds",
    "queues",
    "poll_interval",
    "job_timeout",
    "visibility_timeout",
    "grace_period",
    "call_timeout",
    "claim_bytes",
    "name",
    "listen_conninfo",
)


def http_options(args: argparse.Namespace) -> HttpOptions:
    """What the command serves over HTTP, from its flags."""
    return HttpOptions(metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                       health_port=args.health_port, health_host=args.health_host)  # fmt: skip


def worker_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The worker settings given as flags (None: the target's own)."""
    return {name: getattr(args, name) for name in WORKER_SETTINGS}


def load_worker(target: str, *, dsn: str | None, **settings: Any) -> Worker | AsyncWorker:
    """The worker ``pgqueue worker TARGET`` runs: the target, with the options applied."""
    loaded = load_target(target)
    try:
        return with_overrides(loaded, dsn=dsn, **settings)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"cannot apply the options to {target}: {exc}") from exc


def serve(worker: Worker | AsyncWorker, *, trio: bool, until_empty: bool) -> int:
    """Run ``worker`` until it stops, SIGINT and SIGTERM stopping it; the exit status."""
    try:
        with stop_on_signals(worker.stop):
            if isinstance(worker, Worker):
                run_sync_worker(worker, until_empty=until_empty)
            else:
                backend = "trio" if trio else "asyncio"
                anyio.run(run_async_worker, worker, until_empty, backend=backend)
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130
    except psycopg.errors.UndefinedTable as exc:
        log.error("%s", not_migrated(exc, worker.queue.table))
        return 1
    except Exception:
        log.exception("the worker failed")
        return 1
    return 0


def leave_stuck_calls_behind(status: int = 0, wait: float = 1.0) -> None:
    """Exit now, with ``status``, if database calls the worker gave up on (past
    ``call_timeout``) still hold their threads: a connection gone silent would
    keep the process alive at exit, waiting for a socket that may never answer
    (those jobs come back through their lease)."""
    deadline = time.monotonic() + wait
    stuck = []
    for thread in threading.enumerate():
        if thread is threading.current_thread() or thread.daemon:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            stuck.append(thread)
    if stuck:
        log.warning("%d threads still busy at exit; exiting without them: %s", len(stuck),
                    "; ".join(busy_with(t) for t in stuck))  # fmt: skip
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def busy_with(thread: threading.Thread) -> str:
    """What a thread left at exit is doing, from its stack: a database call
    the worker gave up on, or code of the application's (a handler abandoned
    after the grace period), named by where it is."""
    frame = sys._current_frames().get(thread.ident or -1)
    stack = traceback.extract_stack(frame) if frame is not None else []
    if any(f"{os.sep}psycopg" in f.filename for f in stack):
        return "a database call given up on, waiting on the network"
    library = (os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(__file__)))
    own = [
        f for f in stack if not f.filename.startswith(library) and "site-packages" not in f.filename
    ]
    if own:
        return f"{own[-1].name} at {own[-1].filename}:{own[-1].lineno} (a handler still running)"
    return f"thread {thread.name}"


def metrics_app(
    worker: Worker | AsyncWorker, *, children_dir: str | None = None
) -> tuple[WSGIApp, Queue | None]:
    """The WSGI application that serves the worker's events and its queue's
    stats to Prometheus, and the queue it opened for them (to close after).

    Both go to ``prometheus_client``'s global registry, so that metrics the
    application registers there are served too. With ``children_dir`` (a
    supervisor's, `pgqueue.cli.processes`), the events are those its worker
    processes write there instead, with what they register. The stats are
    read at each scrape with a sync `Queue`: the worker's own, or one
    connection of the same server for an `AsyncWorker`, which is returned
    for the caller to close (None when the worker's own serves).
    """
    try:
        from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app
        from prometheus_client.multiprocess import MultiProcessCollector

        from ..prometheus import PrometheusMetrics, QueueStatsCollector
    except ImportError:
        raise UsageError(
            "--metrics-port needs prometheus_client: pip install 'pgqueue-jobs[prometheus]'"
        ) from None
    opened: Queue | None = None
    if isinstance(worker.queue, Queue):
        queue = worker.queue
    else:
        conninfo = _conninfo(worker.queue)
        if conninfo is None:
            raise UsageError(
                "--metrics-port: the worker's pool has no fixed connection string to read "
                "the queue's stats with; give its AsyncQueue a DSN or a pool with one"
            )
        queue = opened = Queue(conninfo, max_connections=1, **worker.queue.core.options())
    registry = REGISTRY
    try:
        if children_dir is None:
            worker.add_event_listener(PrometheusMetrics())
        else:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=children_dir)  # type: ignore[no-untyped-call]
        QueueStatsCollector(
            queue, registry=registry, visibility_timeout=worker.settings.visibility_timeout
        )
    except ValueError as exc:  # the registry refuses a name registered twice
        if opened is not None:
            opened.close()
        raise UsageError(
            f"--metrics-port: the worker's module already registers pgqueue's metrics ({exc}); "
            "serve them from there, or register them only once"
        ) from exc
    app: WSGIApp = make_wsgi_app(registry)
    return app, opened


def serve_http(
    worker: Worker | AsyncWorker,
    http: HttpOptions,
    health: Callable[[], HealthReport],
    *,
    children_dir: str | None = None,
) -> Callable[[], None]:
    """Serve the metrics (``--metrics-port``) and the health probes
    (``--health-port``) the command line asks for; returns what closes them."""
    app, opened = (
        metrics_app(worker, children_dir=children_dir) if http.metrics_port else (None, None)
    )
    try:
        endpoints = serve_endpoints(http, metrics=app, health=health)
    except BaseException:
        if opened is not None:
            opened.close()
        raise

    def close() -> None:
        endpoints.close()
        if opened is not None:
            opened.close()

    return close


def load_target(spec: str) -> Worker | AsyncWorker:
    """Import ``module:attr.path`` and check that it names a worker."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise UsageError(f"TARGET must look like module:attribute, got {spec!r}")
    # Like `python -m`: modules of the project the command runs in are importable.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # whatever the module raises at import: one line, status 2
        if isinstance(exc, ModuleNotFoundError) and exc.name == module_name:
            raise UsageError(f"no module named {module_name!r} (from {cwd})") from exc
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        raise UsageError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}{where}"
        ) from exc
    obj: Any = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attr_path!r}") from None
    if isinstance(obj, (Worker, AsyncWorker)):
        return obj
    if isinstance(obj, (Queue, AsyncQueue)):
        kind = "Worker" if isinstance(obj, Queue) else "AsyncWorker"
        raise UsageError(
            f"{spec} is a pgqueue.{type(obj).__name__}, not a worker: name a pgqueue.{kind} built "
            f"on it, with its handlers, e.g. worker = pgqueue.{kind}(queue, handlers)"
        )
    what = f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"
    raise UsageError(f"{spec} is {what}, not a pgqueue.Worker or pgqueue.AsyncWorker instance")


def with_overrides(
    target: Worker | AsyncWorker, *, dsn: str | None, **overrides: Any
) -> Worker | AsyncWorker:
    """The target itself, or a copy of it with these settings (the names of
    `pgqueue.core.worker.WorkerSettings`; None keeps the target's) and server."""
    queue = target.queue
    new_dsn = dsn is not None and dsn != _conninfo(queue)
    changed = {name: value for name, value in overrides.items() if value is not None}
    if not new_dsn and not changed:
        if isinstance(target, AsyncWorker):
            target.handle_signals = True
        return target
    settings: dict[str, Any] = {
        f.name: getattr(target.settings, f.name) for f in dataclasses.fields(target.settings)
    }
    unknown = set(changed) - set(settings)
    if unknown:
        raise TypeError(f"not a worker setting: {', '.join(sorted(unknown))}")
    settings.update(changed)
    handlers: dict[str, Callable[..., Any]] = {}
    for kind in target.handlers.kinds():
        fn = target.handlers.get(kind)
        assert fn is not None
        handlers[kind] = fn
    # The same classes, so that a subclass keeps what it overrides.
    if isinstance(target, Worker):
        assert isinstance(queue, Queue)
        if dsn is not None and new_dsn:
            queue = type(queue)(dsn, **queue.core.options())
        copy = type(target)(queue, handlers, handle_signals=True, **settings)
        copy.carry_over(target)
        return copy
    assert isinstance(queue, AsyncQueue)
    if dsn is not None and new_dsn:
        queue = type(queue)(dsn, **queue.core.options())
    acopy = type(target)(queue, handlers, handle_signals=True, **settings)
    acopy.carry_over(target)
    return acopy


def _conninfo(queue: Queue | AsyncQueue) -> str | None:
    try:
        return queue.conninfo
    except TypeError:  # a pool whose conninfo is a function
        return None


def run_sync_worker(worker: Worker, *, until_empty: bool) -> None:
    """Run a `Worker` until it stops, then close its queue."""
    try:
        worker.run(until_empty=until_empty)
    finally:
        worker.queue.close()


async def run_async_worker(worker: AsyncWorker, until_empty: bool) -> None:
    """Run an `AsyncWorker` until it stops, then close its queue, shielded from cancellation."""
    try:
        await worker.run(until_empty=until_empty)
    finally:
        with anyio.CancelScope(shield=True):
            await worker.queue.close()


@contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGINT and SIGTERM stop the worker gracefully.

    While it serves, the worker watches these signals itself (and a second
    one interrupts its running jobs); these handlers cover the moments
    around that, and ``--until-empty`` runs, where it does not. `stop` is
    called from a thread of its own: it is thread-safe, and a signal handler
    must not touch the event loop it interrupted.
    """

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("%s: stopping gracefully", signal.Signals(signum).name)
        threading.Thread(target=stop, name="pgqueue-stop", daemon=True).start()

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set signal handlers
        return
    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
