"""pgqueue in a Flask app: an extension, and the ``flask pgqueue`` commands.

    pgq = PgQueue()

    def create_app() -> Flask:
        app = Flask(__name__)
        app.config["PGQUEUE_DSN"] = "postgresql://localhost/shop"
        pgq.init_app(app)
        return app

    @app.post("/orders")
    def create_order():
        with pgq.transaction() as conn:        # a pooled connection, in a transaction
            conn.execute("INSERT INTO orders ...")
            pgq.enqueue("send_receipt", {...})  # joins it: commits with the order, or not at all

    @pgq.task
    def send_receipt(order_id: int) -> None: ...  # a task: runs in the app's context

    send_receipt.enqueue(order.id)            # joins the request's transaction too

    @pgq.handler("legacy_kind")               # the lower level: a handler takes the Job
    def legacy(job: pgqueue.Job) -> None: ...

    $ flask --app shop pgqueue migrate
    $ flask --app shop pgqueue worker --concurrency 8

Configuration: ``PGQUEUE_DSN`` (required), ``PGQUEUE_TABLE`` (default
``pgqueue_jobs``), ``PGQUEUE_MAX_CONNECTIONS`` (the pool's size, default
10), ``PGQUEUE_TRANSACTION_POOLING`` (True when the DSN reaches the server
through PgBouncer in transaction mode: docs/pgbouncer.md) and
``PGQUEUE_WORKER`` (keyword options of `pgqueue.Worker` for
`PgQueue.worker` and ``flask pgqueue worker``, e.g. ``listen_conninfo``).
See docs/frameworks.md.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast, overload

import click
import psycopg
from flask import Flask, current_app, g
from flask.cli import AppGroup, ScriptInfo
from psycopg_pool import ConnectionPool

from ..cli.errors import UsageError
from ..cli.flags import CommandFlags, click_options
from ..cli.worker import run_worker_command
from ..core.jobs import JobSpec
from ..core.ops import QueueCore
from ..core.tasks import TaskDefaults, TaskDefinition, TaskRegistry
from ..core.worker import check_worker_options
from ..sync.driver import make_pool
from ..sync.queue import Queue
from ..sync.tasks import Task
from ..sync.worker import Worker

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["PgQueue"]

H = TypeVar("H", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")
ConnectionLoader = Callable[[], "psycopg.Connection[Any] | None"]

EXTENSION_KEY = "pgqueue"
# Where `PgQueue.transaction` keeps its connection, on `flask.g` (one per app context).
_G_CONNECTION = "_pgqueue_connection"


@dataclass
class _AppState:
    """What `PgQueue` keeps for one app, in ``app.extensions["pgqueue"]``."""

    extension: PgQueue
    dsn: str
    table: str
    max_connections: int
    transaction_pooling: bool
    # Made at first use by whichever thread comes first, under the lock; dropped by close().
    _opened: tuple[ConnectionPool, Queue] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self) -> tuple[ConnectionPool, Queue]:
        with self._lock:
            if self._opened is None:
                pooling = self.transaction_pooling
                pool = make_pool(
                    self.dsn, max_size=self.max_connections, transaction_pooling=pooling
                )
                pool.open(wait=False)
                self._opened = (pool, Queue(pool, table=self.table, transaction_pooling=pooling))
            return self._opened

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, None
        if opened is not None:
            opened[0].close()


class PgQueue:
    """The pgqueue extension: a `pgqueue.Queue` on a pool of its own, per app.

    Give it the app (``PgQueue(app)``) or call `init_app` from an app
    factory. Registered handlers (`handler`) serve every app the extension
    is initialised on; each handler call runs inside an app context of the
    worker's app, so ``current_app``, `transaction` and the app's other
    extensions work there as in a view.
    """

    def __init__(self, app: Flask | None = None) -> None:
        self._handlers: dict[str, Callable[..., Any]] = {}
        self._tasks = TaskRegistry()  # written by `task`, read by `worker`
        self._connection_loader: ConnectionLoader | None = None
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Read the app's ``PGQUEUE_*`` settings, make its queue and pool (opened at
        first use) and add the ``flask pgqueue`` commands.

        Raises `ValueError` or `TypeError` for a missing DSN or a bad setting.
        """
        dsn = app.config.get("PGQUEUE_DSN")
        if not isinstance(dsn, str) or not dsn:
            raise ValueError(
                "PGQUEUE_DSN is not set: set app.config['PGQUEUE_DSN'] to the database's "
                "connection string before init_app"
            )
        table = app.config.setdefault("PGQUEUE_TABLE", "pgqueue_jobs")
        size = app.config.setdefault("PGQUEUE_MAX_CONNECTIONS", 10)
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"PGQUEUE_MAX_CONNECTIONS must be an int of 1 or more, not {size!r}")
        pooling = app.config.setdefault("PGQUEUE_TRANSACTION_POOLING", False)
        if not isinstance(pooling, bool):
            raise TypeError(f"PGQUEUE_TRANSACTION_POOLING must be True or False, not {pooling!r}")
        worker_options = app.config.setdefault("PGQUEUE_WORKER", {})
        if not isinstance(worker_options, Mapping):
            raise TypeError(
                f"PGQUEUE_WORKER must be a dict of pgqueue.Worker options, not {worker_options!r}"
            )
        check_worker_options(worker_options, "PGQUEUE_WORKER")
        QueueCore(table)  # refuses a table name that is not one, now rather than at first use
        app.extensions[EXTENSION_KEY] = _AppState(self, dsn, table, size, pooling)
        app.cli.add_command(commands)

    # -- the queue ------------------------------------------------------------

    def _state(self, app: Flask | None = None) -> _AppState:
        target = app if app is not None else current_app
        state = target.extensions.get(EXTENSION_KEY)
        if not isinstance(state, _AppState) or state.extension is not self:
            raise RuntimeError(f"PgQueue.init_app was not called for the app {target.name!r}")
        return state

    @property
    def queue(self) -> Queue:
        """The current app's `pgqueue.Queue` (needs an app context)."""
        return self._state().open()[1]

    @property
    def pool(self) -> ConnectionPool:
        """The current app's connection pool, shared by its queue and `transaction`."""
        return self._state().open()[0]

    def close(self, app: Flask | None = None) -> None:
        """Close the app's pool (the current app's without ``app``); a later use opens a new one."""
        self._state(app).close()

    # -- the request's connection ---------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a connection from the app's pool and open a transaction on it;
        `enqueue` inside the block joins it.

            with pgq.transaction() as conn:
                conn.execute("INSERT INTO orders ...")
                pgq.enqueue("send_receipt", {"order_id": 7})

        The block commits when it ends, or rolls back if it raises: the jobs
        with it. Nested, it is a savepoint on the same connection.
        """
        current: psycopg.Connection[Any] | None = g.get(_G_CONNECTION)
        if current is not None:
            with current.transaction():
                yield current
            return
        with self.pool.connection() as conn, conn.transaction():
            setattr(g, _G_CONNECTION, conn)
            try:
                yield conn
            finally:
                g.pop(_G_CONNECTION, None)

    def connection_loader(self, loader: ConnectionLoader) -> ConnectionLoader:
        """Register a function that returns the app's own connection for this
        request (or None): `enqueue` outside `transaction` joins it. A decorator.

            @pgq.connection_loader
            def session_connection() -> psycopg.Connection | None:
                return psycopg_connection(db.session)  # pgqueue.contrib.sqlalchemy
        """
        if not callable(loader):
            raise TypeError(f"connection_loader needs a function, not {loader!r}")
        self._connection_loader = loader
        return loader

    def current_connection(self) -> psycopg.Connection[Any] | None:
        """The connection `enqueue` joins: `transaction`'s, else the
        `connection_loader`'s, else None (the queue commits the job itself)."""
        current: psycopg.Connection[Any] | None = g.get(_G_CONNECTION)
        if current is None and self._connection_loader is not None:
            current = self._connection_loader()
        return current

    def enqueue(
        self,
        kind: str,
        payload: Any = None,
        *,
        conn: psycopg.Connection[Any] | None = None,
        **options: Any,
    ) -> int:
        """`pgqueue.Queue.enqueue` on the current app's queue, on ``conn`` or
        else on `current_connection`: in the request's transaction when it has one."""
        joined = conn if conn is not None else self.current_connection()
        return self.queue.enqueue(kind, payload, conn=joined, **options)

    def _enqueue_spec(self, spec: JobSpec, conn: psycopg.Connection[Any] | None = None) -> int:
        """(A task's enqueue.) As `enqueue`, the job as its `JobSpec`."""
        joined = conn if conn is not None else self.current_connection()
        return self.queue._enqueue_spec(spec, joined)

    def enqueue_many(
        self,
        specs: Any,
        *,
        conn: psycopg.Connection[Any] | None = None,
    ) -> list[int]:
        """`pgqueue.Queue.enqueue_many`, joining the connection as `enqueue` does."""
        checked: list[JobSpec | tuple[str, Any]] = list(specs)
        joined = conn if conn is not None else self.current_connection()
        return self.queue.enqueue_many(checked, conn=joined)

    # -- the worker -----------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, /, *, kind: str | None = None, **defaults: Unpack[TaskDefaults]
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        kind: str | None = None,
        **defaults: Unpack[TaskDefaults],
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Make a plain function a task: a job kind whose jobs call it, in an
        app context, as `pgqueue.Queue.task` does.

            @pgq.task(max_attempts=5)
            def send_receipt(order_id: int) -> None:
                mailer.send(Order.query.get(order_id))

            @app.post("/orders")
            def create_order():
                with pgq.transaction() as conn:
                    conn.execute("INSERT INTO orders ...")
                    send_receipt.enqueue(order_id)   # commits with the order, or not at all

        The returned `pgqueue.Task` enqueues on the current app's queue,
        joining the request's connection as `enqueue` does (or the one given
        with ``.options(conn=...)``); calling it calls the function. ``kind``
        and ``defaults`` are those of `pgqueue.Queue.task`. `worker` (and
        ``flask pgqueue worker``) runs the tasks beside the handlers. A bad
        option, an ``async def`` function or a second function for a kind
        raises `TypeError` or `ValueError` here.
        """

        def make(fn: Callable[P, R]) -> Task[P, R]:
            if inspect.iscoroutinefunction(fn):
                raise TypeError(f"{fn.__qualname__} is async; Flask's worker runs plain functions")
            definition = TaskDefinition(fn, kind, defaults)
            if definition.kind in self._handlers:
                raise ValueError(
                    f"job kind {definition.kind!r} has a handler already: give the task "
                    "another kind="
                )
            self._tasks.add(definition)
            # The extension stands in for the queue: it enqueues on the current
            # app's, joining the request's connection.
            return Task(cast("Queue", self), definition, definition.options)

        return make if fn is None else make(fn)

    def handler(self, kind: str) -> Callable[[H], H]:
        """Register the decorated plain function as the handler of ``kind``:
        the lower level of `task`, a function that takes the `pgqueue.Job`."""

        def register(fn: H) -> H:
            if not callable(fn):
                raise TypeError(f"the handler for {kind!r} is not callable")
            if inspect.iscoroutinefunction(fn):
                raise TypeError(
                    f"the handler for {kind!r} is async; Flask's worker runs plain functions"
                )
            if self._tasks.get(kind) is not None:
                raise ValueError(f"job kind {kind!r} is a task already (pgq.task)")
            self._handlers[kind] = fn
            return fn

        return register

    def worker(self, app: Flask | None = None, **options: Any) -> Worker:
        """A `pgqueue.Worker` on the app's queue with the registered handlers,
        each run in an app context; ``options`` over ``PGQUEUE_WORKER``."""
        target: Flask = app if app is not None else current_app._get_current_object()  # type: ignore[attr-defined]
        _, queue = self._state(target).open()
        settings = {**target.config["PGQUEUE_WORKER"], **options}
        handlers = {
            kind: _in_app_context(target, fn)
            for kind, fn in self._tasks.handlers(self._handlers).items()
        }
        return Worker(queue, handlers, **settings)


def _in_app_context(app: Flask, fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(job: Any) -> Any:
        with app.app_context():
            return fn(job)

    run.__name__ = getattr(fn, "__name__", "handler")
    run.__qualname__ = getattr(fn, "__qualname__", run.__name__)
    run.__doc__ = fn.__doc__
    return run


# -- flask pgqueue ... ---------------------------------------------------------

commands = AppGroup("pgqueue", help="The app's job queue (pgqueue).")


@commands.command("migrate")
def migrate_command() -> None:
    """Create or upgrade the queue's schema."""
    state = _current_state()
    try:
        applied = state.open()[1].install()
    finally:
        state.close()
    click.echo(f"applied migrations {applied}" if applied else "the schema is up to date")


@commands.command("worker")
@click_options()
@click.option("--queue", "queue", multiple=True, hidden=True, help="Deprecated: --queues.")
@click.option("--kind", "kind", multiple=True, hidden=True, help="Deprecated: --kinds.")
def worker_command(queue: tuple[str, ...], kind: tuple[str, ...], **given: Any) -> None:
    """Run the app's tasks and handlers until SIGINT or SIGTERM (a second one
    interrupts running jobs), or with --until-empty until no job is ready or
    running. Takes every flag of `pgqueue worker` but TARGET, --dsn and --trio."""
    ctx = click.get_current_context()
    # The repeatable --queue and --kind of earlier releases: --queues a,b and --kinds a,b now.
    for old, new, names in (("--queue", "queues", queue), ("--kind", "kinds", kind)):
        if names:
            click.echo(f"warning: {old} is deprecated; use --{new} a,b", err=True)
            given[new] = [*(given[new] or ()), *names]
    flags = CommandFlags.from_parsed(given)
    state = _current_state()
    if flags.processes is not None:
        info = ctx.ensure_object(ScriptInfo)
        if info.app_import_path is None and info.create_app is not None:
            raise click.UsageError(
                "--processes needs the app named by --app or FLASK_APP: each worker process "
                "loads it"
            )
        build: Callable[[], Worker] = functools.partial(_app_worker, info.app_import_path)
    else:
        build = functools.partial(state.extension.worker, current_app._get_current_object())  # type: ignore[attr-defined]
    try:
        status = run_worker_command(build, flags, what="the app's worker", migrate=FLASK_MIGRATE)
    except UsageError as exc:
        raise click.UsageError(str(exc)) from exc
    finally:
        state.close()
    ctx.exit(status)


FLASK_MIGRATE = "flask pgqueue migrate"


def _app_worker(app_import_path: str | None) -> Worker:
    """The worker of ``flask pgqueue worker``, in a process that loads the app anew."""
    app = ScriptInfo(app_import_path=app_import_path).load_app()
    state = app.extensions.get(EXTENSION_KEY)
    if not isinstance(state, _AppState):
        raise UsageError("this app has no pgqueue extension: call PgQueue.init_app(app)")
    return state.extension.worker(app)


def _current_state() -> _AppState:
    state = current_app.extensions.get(EXTENSION_KEY)
    if not isinstance(state, _AppState):
        raise click.UsageError("this app has no pgqueue extension: call PgQueue.init_app(app)")
    return state
