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
from typing import Any, TypeVar

import anyio
import psycopg.errors

from ..aio.queue import AsyncQueue
from ..aio.worker import AsyncWorker
from ..core.health import HealthReport, assess
from ..sync.queue import Queue
from ..sync.worker import Worker
from .errors import UsageError, not_migrated
from .flags import (
    COMMAND_FLAGS,
    LOG_LEVELS,
    SETTING_FLAGS,
    WORKER_SETTINGS,
    CommandFlags,
    add_arguments,
)
from .parsers import leaf
from .probes import HttpOptions, WSGIApp, serve_endpoints

# The name docs/observability.md gives the command's logger, whichever module logs.
log = logging.getLogger("pgqueue.cli")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

WorkerFactory = Callable[[], "Worker | AsyncWorker"]
"""Builds the worker a command runs; picklable (a module-level function, or
a `functools.partial` of one), since each worker process of ``--processes``
calls it in its interpreter."""

__all__ = [
    "LOG_LEVELS",
    "WORKER_SETTINGS",
    "WorkerFactory",
    "add_commands",
    "load_worker",
    "run_worker",
    "run_worker_command",
    "serve",
    "with_overrides",
]


def add_commands(commands: Any) -> None:
    """``worker TARGET``, with a flag for each of the worker's settings."""
    worker = leaf(
        commands,
        "worker",
        run_worker,
        "run a pgqueue.Worker or pgqueue.AsyncWorker",
        "Run the worker named by TARGET until SIGINT or SIGTERM (a first signal stops "
        "it gracefully, a second interrupts running jobs), or with --until-empty until "
        "no job is ready or running.",
    )
    worker.add_argument(
        "target",
        metavar="TARGET",
        help="module:attribute naming a pgqueue.Worker or pgqueue.AsyncWorker, "
        "e.g. myapp.jobs:worker (the current directory is importable)",
    )
    worker.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN") or None,
        help="connect to this server instead of the one the worker's queue names "
        "(default: $PGQUEUE_DSN if set); the table stays the worker's",
    )
    # Every flag that `flask pgqueue worker` and `manage.py pgqueue_worker` take too.
    add_arguments(worker, SETTING_FLAGS)
    worker.add_argument(
        "--trio", action="store_true", help="run an AsyncWorker on trio instead of asyncio"
    )
    add_arguments(worker, COMMAND_FLAGS)


def run_worker(args: argparse.Namespace) -> int:
    """``pgqueue worker TARGET``."""
    build = functools.partial(load_target, args.target)
    flags = CommandFlags.from_parsed(vars(args), trio=args.trio)
    return run_worker_command(build, flags, dsn=args.dsn, what=args.target)


def run_worker_command(
    build: WorkerFactory,
    flags: CommandFlags,
    *,
    what: str,
    dsn: str | None = None,
    migrate: str = "pgqueue migrate",
    started: Callable[[Worker | AsyncWorker], None] | None = None,
    exit_if_stuck: bool = True,
) -> int:
    """Run the worker ``build`` makes, with the ``flags`` a worker command was
    given (`pgqueue.cli.flags`); the command's exit status.

    The one runner of ``pgqueue worker``, ``flask pgqueue worker`` and
    ``manage.py pgqueue_worker``: the settings given override the worker's own
    (`with_overrides`), ``--processes`` runs it under a supervisor, else it is
    served here, with its metrics and health probes, until it stops.
    ``build`` is picklable (each worker process calls it); ``what`` names the
    worker in errors; ``migrate`` is the command that installs the schema,
    named when the worker starts before it ran; ``started`` is called with the
    worker before it runs (not with ``--processes``); ``exit_if_stuck=False``
    returns even when threads the worker gave up on are still busy (a
    command called in-process, not one about to end its process: see
    `leave_stuck_calls_behind`). Bad flags, or a worker that cannot be built,
    raise `UsageError`.
    """
    logging.basicConfig(level=flags.log_level, format=LOG_FORMAT, stream=sys.stderr)
    if flags.trio and importlib.util.find_spec("trio") is None:
        raise UsageError("--trio needs trio installed: pip install trio")
    if flags.max_jobs_per_child is not None and flags.processes is None:
        raise UsageError("--max-jobs-per-child needs --processes")
    configured_build = functools.partial(configured, build, what, dsn, flags.settings)
    if flags.processes is not None:
        from .processes import supervise

        return supervise(configured_build, processes=flags.processes,
                         max_jobs_per_child=flags.max_jobs_per_child, trio=flags.trio,
                         until_empty=flags.until_empty, http=flags.http,
                         log_level=flags.log_level, migrate=migrate)  # fmt: skip
    worker = configured_build()
    if flags.trio and isinstance(worker, Worker):
        raise UsageError("--trio runs an AsyncWorker; a pgqueue.Worker runs on threads")
    if started is not None:
        started(worker)
    stamps = worker.health
    close = serve_http(worker, flags.http, lambda: assess([stamps]))
    try:
        status = serve(worker, trio=flags.trio, until_empty=flags.until_empty, migrate=migrate)
    finally:
        close()
    if status == 0 and exit_if_stuck:
        leave_stuck_calls_behind()
    return status


def http_options(args: argparse.Namespace) -> HttpOptions:
    """What the command serves over HTTP, from its flags."""
    return CommandFlags.from_parsed(vars(args)).http


def worker_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The worker settings given as flags (None: the target's own)."""
    return CommandFlags.from_parsed(vars(args)).settings


def load_worker(target: str, *, dsn: str | None, **settings: Any) -> Worker | AsyncWorker:
    """The worker ``pgqueue worker TARGET`` runs: the target, with the options applied."""
    return configured(functools.partial(load_target, target), target, dsn, settings)


def configured(
    build: WorkerFactory, what: str, dsn: str | None, settings: dict[str, Any]
) -> Worker | AsyncWorker:
    """The worker ``build`` makes, with the settings given (None: its own) and
    on the server ``dsn`` names (None: its own); module-level, so that a
    `functools.partial` of it is picklable for ``--processes``."""
    try:
        worker = build()
    except (TypeError, ValueError) as exc:  # the framework's settings, refused by the worker
        raise UsageError(f"cannot build the worker: {exc}") from exc
    try:
        return with_overrides(worker, dsn=dsn, **settings)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"cannot apply the options to {what}: {exc}") from exc


def serve(
    worker: Worker | AsyncWorker,
    *,
    trio: bool,
    until_empty: bool,
    migrate: str = "pgqueue migrate",
) -> int:
    """Run ``worker`` until it stops, SIGINT and SIGTERM stopping it; the exit
    status. A table never installed is said in one line naming ``migrate``."""
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
        log.error("%s", not_migrated(exc, worker.queue.table, migrate))
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
    """What a thread left at exit is doing, from its stack: code of the
    application's (a handler abandoned after the grace period, even one
    waiting on a query of its own), named by where it is, or else a database
    call the worker gave up on."""
    frame = sys._current_frames().get(thread.ident or -1)
    stack = traceback.extract_stack(frame) if frame is not None else []
    library = (os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(__file__)))
    own = [
        f for f in stack if not f.filename.startswith(library) and "site-packages" not in f.filename
    ]
    # The application's code first: a handler waiting on a database call of
    # its own is still a handler.
    if own:
        return f"{own[-1].name} at {own[-1].filename}:{own[-1].lineno} (a handler still running)"
    if any(f"{os.sep}psycopg" in f.filename for f in stack):
        return "a database call given up on, waiting on the network"
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


def import_target(spec: str) -> Any:
    """Import ``module:attr.path`` (the current directory importable) and return it."""
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
    return obj


def load_target(spec: str) -> Worker | AsyncWorker:
    """Import ``module:attr.path`` and check that it names a worker."""
    obj = import_target(spec)
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
    on = dsn if new_dsn else None
    if isinstance(target, Worker):
        return _copy(target, on, handlers, settings)
    return _copy(target, on, handlers, settings)


W = TypeVar("W", Worker, AsyncWorker)


def _copy(
    target: W, dsn: str | None, handlers: dict[str, Callable[..., Any]], settings: dict[str, Any]
) -> W:
    """A copy of ``target`` with these handlers and settings, on a queue of
    the same table on ``dsn`` (None: the same queue). The same classes, so
    that a subclass keeps what it overrides."""
    queue = target.queue
    if dsn is not None:
        queue = type(queue)(dsn, **queue.core.options())
    copy = type(target)(queue, handlers, handle_signals=True, **settings)
    copy.carry_over(target)
    return copy


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
