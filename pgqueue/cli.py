"""The ``pgqueue`` command: run workers, and operate a queue from a shell.

    pgqueue migrate                                     # create or upgrade the schema
    pgqueue enqueue send_receipt '{"order_id": 42}' --delay 15m
    pgqueue stats                                       # counts, oldest wait, expired leases
    pgqueue jobs list --status running --kind send_receipt
    pgqueue jobs show 17
    pgqueue dead list
    pgqueue dead retry 17 18                            # or: --all [--kind K]
    pgqueue dead purge --older-than 30d
    pgqueue history prune --older-than 90d
    pgqueue reap --visibility-timeout 10m
    pgqueue worker myapp.jobs:worker                    # until SIGINT or SIGTERM
    pgqueue worker myapp.jobs:async_worker --trio       # an AsyncWorker on trio
    pgqueue bench                                       # throughput, beside the seed design

Every operator subcommand (all but ``worker`` and ``bench``) takes ``--dsn``
(default ``$PGQUEUE_DSN``), ``--table`` (default ``$PGQUEUE_TABLE``, else
``pgqueue_jobs``) and ``--json`` (one JSON document on stdout instead of
aligned text), after the subcommand. A DURATION is ``90`` (seconds), ``90s``,
``15m``, ``12h``, ``7d`` or a combination in that order such as ``1h30m``.

``worker TARGET`` names a `pgqueue.Worker` or `pgqueue.AsyncWorker` as
``module:attribute`` (the attribute may be dotted); the current directory is
put on ``sys.path`` first, so a module of the project the command runs in can
be named. Its ``--dsn`` (default ``$PGQUEUE_DSN``), ``--concurrency`` and
``--kinds`` override the worker's own settings: the command then runs a copy
of the worker, with the same handlers and other settings, on a queue of the
same table.

Exit status:

* 0: done (also when there was nothing to do: no job to reap, retry or purge);
  for ``worker``, the worker stopped (a first SIGINT or SIGTERM stops it
  gracefully; see `pgqueue.AsyncWorker`).
* 1: an operational failure, reported in one line on stderr: the database
  cannot be reached or refused a statement, its schema is newer than this
  pgqueue (`pgqueue.SchemaTooNew`) or the table is not a queue's, ``jobs
  show`` found no such job, ``dead retry ID...`` named a job that is not dead
  (the dead ones named are still retried), or the worker failed.
* 2: bad arguments (no DSN, a malformed DURATION, PAYLOAD or date, a target
  that cannot be loaded...): a usage message on stderr, nothing written.
* 130: interrupted by SIGINT before a clean stop.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import FrameType
from typing import Any

import anyio
import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from . import __version__
from . import bench as pgqueue_bench
from .aio.queue import AsyncQueue
from .aio.worker import AsyncWorker
from .core.jobs import (
    DEFAULT_VISIBILITY_TIMEOUT,
    Job,
    JobStatus,
    Stats,
    validate_kind,
    validate_spec,
    validate_table_name,
)
from .core.migrations import SchemaError
from .sync.queue import Queue
from .sync.worker import Worker

__all__ = ["main", "parse_duration"]

log = logging.getLogger("pgqueue.cli")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
DEFAULT_TABLE = "pgqueue_jobs"
# A connection attempt that hears nothing gives up after this long, unless the
# DSN or PGCONNECT_TIMEOUT says otherwise: an operator waits, a script hangs.
CONNECT_TIMEOUT_SECONDS = 10

EXIT_CODES = """\
exit status:
  0    done (also when there was nothing to do)
  1    operational failure: cannot connect, database error, schema newer than
       this pgqueue, `jobs show` found no such job, `dead retry ID` named a
       job that is not dead, or the worker failed
  2    bad arguments: usage message on stderr, nothing written
  130  interrupted

Operator commands take --dsn (default $PGQUEUE_DSN), --table (default
$PGQUEUE_TABLE, else pgqueue_jobs) and --json after the subcommand.
DURATION: 90 (seconds), 90s, 15m, 12h, 7d, or combined in that order: 1h30m.
"""


class UsageError(Exception):
    """Bad arguments or an unusable target: reported with the usage line, exit 2."""


class OperationFailed(Exception):
    """An operation that could not be done: one line on stderr, exit 1."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pgqueue`` command; return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    command: Callable[[argparse.Namespace], int] = args.run
    try:
        return command(args)
    except UsageError as exc:
        args.subparser.error(str(exc))  # prints the usage and exits with 2
        raise AssertionError("unreachable") from exc  # pragma: no cover
    except KeyboardInterrupt:
        print(f"{args.subparser.prog}: interrupted", file=sys.stderr)
        return 130
    except (OperationFailed, SchemaError) as exc:
        return failed(args, str(exc))
    except PoolTimeout as exc:
        return failed(args, f"cannot connect to the database: {one_line(exc)}")
    except psycopg.errors.UndefinedTable as exc:
        return failed(
            args,
            f"{server_message(exc)} (is --table right, and has `pgqueue migrate` run for it?)",
        )
    except psycopg.Error as exc:
        return failed(args, f"database error: {server_message(exc)}")


def failed(args: argparse.Namespace, message: str) -> int:
    """Report an operational failure on one line of stderr; exit status 1."""
    print(f"{args.subparser.prog}: error: {message}", file=sys.stderr)
    return 1


def one_line(exc: BaseException | str) -> str:
    """A message on one line (libpq's span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def server_message(exc: psycopg.Error) -> str:
    """What the server said, without the statement it quotes; else the client's message."""
    primary = exc.diag.message_primary
    if not primary:
        return one_line(exc)
    hint = exc.diag.message_hint
    return one_line(f"{primary} (hint: {hint})" if hint else primary)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every subcommand and its options."""
    parser = argparse.ArgumentParser(
        prog="pgqueue",
        description="A durable job queue inside PostgreSQL.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pgqueue {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_operator_commands(commands)

    worker = commands.add_parser(
        "worker",
        help="run a pgqueue.Worker or pgqueue.AsyncWorker",
        description=(
            "Run the worker named by TARGET until SIGINT or SIGTERM (a first signal stops "
            "it gracefully, a second interrupts running jobs), or with --until-empty until "
            "no job is ready or running."
        ),
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
    worker.add_argument("--concurrency", type=positive_int, metavar="N", help="jobs run at a time")
    worker.add_argument(
        "--kinds",
        type=kind_list,
        metavar="KIND[,KIND...]",
        help="handle only these kinds of job (comma-separated)",
    )
    worker.add_argument(
        "--until-empty",
        action="store_true",
        help="exit 0 once no job is ready or running",
    )
    worker.add_argument(
        "--trio", action="store_true", help="run an AsyncWorker on trio instead of asyncio"
    )
    worker.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="logging level (default: INFO); logs go to stderr",
    )
    worker.set_defaults(run=run_worker, subparser=worker)

    bench = commands.add_parser(
        "bench",
        help="measure enqueue and drain throughput beside the seed design",
        description=pgqueue_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pgqueue_bench.add_arguments(bench)
    bench.set_defaults(run=run_bench, subparser=bench)
    return parser


def run_bench(args: argparse.Namespace) -> int:
    """``pgqueue bench``."""
    if min(args.jobs, args.repeat, args.concurrency, args.batch_size) < 1:
        raise UsageError("--jobs, --repeat, --concurrency and --batch-size must be at least 1")
    return pgqueue_bench.run(args)


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def kind_list(text: str) -> list[str]:
    """An argparse type: comma-separated job kinds."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    if not kinds:
        raise argparse.ArgumentTypeError("name at least one kind")
    return kinds


# -- pgqueue worker ---------------------------------------------------------------


def run_worker(args: argparse.Namespace) -> int:
    """``pgqueue worker TARGET``."""
    logging.basicConfig(level=args.log_level, format=LOG_FORMAT, stream=sys.stderr)
    target = load_target(args.target)
    if args.trio and isinstance(target, Worker):
        raise UsageError("--trio runs an AsyncWorker; a pgqueue.Worker runs on threads")
    if args.trio and importlib.util.find_spec("trio") is None:
        raise UsageError("--trio needs trio installed: pip install trio")
    try:
        worker = with_overrides(target, dsn=args.dsn, concurrency=args.concurrency,
                                kinds=args.kinds)  # fmt: skip
    except (TypeError, ValueError) as exc:
        raise UsageError(f"cannot apply the options to {args.target}: {exc}") from exc

    try:
        with stop_on_signals(worker.stop):
            if isinstance(worker, Worker):
                run_sync_worker(worker, until_empty=args.until_empty)
            else:
                backend = "trio" if args.trio else "asyncio"
                anyio.run(run_async_worker, worker, args.until_empty, backend=backend)
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130
    except Exception:
        log.exception("the worker failed")
        return 1
    return 0


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
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == module_name:
            raise UsageError(f"no module named {module_name!r} (from {cwd})") from exc
        raise UsageError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
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
    target: Worker | AsyncWorker,
    *,
    dsn: str | None,
    concurrency: int | None,
    kinds: list[str] | None,
) -> Worker | AsyncWorker:
    """The target itself, or a copy of it with these settings and server."""
    queue = target.queue
    new_dsn = dsn is not None and dsn != _conninfo(queue)
    if not new_dsn and concurrency is None and kinds is None:
        if isinstance(target, AsyncWorker):
            target.handle_signals = True
        return target
    settings: dict[str, Any] = {
        f.name: getattr(target.settings, f.name) for f in dataclasses.fields(target.settings)
    }
    if concurrency is not None:
        settings["concurrency"] = concurrency
    if kinds is not None:
        settings["kinds"] = kinds
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
        return type(target)(queue, handlers, handle_signals=True, **settings)
    assert isinstance(queue, AsyncQueue)
    if dsn is not None and new_dsn:
        queue = type(queue)(dsn, **queue.core.options())
    return type(target)(queue, handlers, handle_signals=True, **settings)


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


# -- the operator's commands ------------------------------------------------------

_DURATION = re.compile(r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")
_DURATION_UNITS = ("days", "hours", "minutes", "seconds")


def parse_duration(text: str) -> timedelta:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, or units combined in that order (``1h30m``).

    >>> parse_duration("1h30m")
    datetime.timedelta(seconds=5400)
    """
    bad = argparse.ArgumentTypeError(
        f"not a duration: {text!r} (use e.g. 90, 90s, 15m, 12h, 7d or 1h30m)"
    )
    if re.fullmatch(r"[0-9]+", text):
        parts: dict[str, int] = {"seconds": int(text)}
    else:
        match = _DURATION.fullmatch(text)
        if match is None or not any(match.groups()):
            raise bad
        parts = {unit: int(n) for unit, n in zip(_DURATION_UNITS, match.groups(), strict=True) if n}
    try:
        return timedelta(**parts)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"duration too long: {text!r}") from None


def positive_duration(text: str) -> timedelta:
    """An argparse type: a DURATION longer than zero."""
    value = parse_duration(text)
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"must be longer than 0, got {text!r}")
    return value


def job_id(text: str) -> int:
    """An argparse type: a job id (a positive bigint)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a job id: {text!r}") from None
    if not 1 <= value <= 2**63 - 1:
        raise argparse.ArgumentTypeError(f"not a job id: {text!r}")
    return value


def table_name(text: str) -> str:
    """An argparse type: a safe table name, ``name`` or ``schema.name``."""
    try:
        validate_table_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def kind_name(text: str) -> str:
    """An argparse type: a job kind, checked as `enqueue` checks it."""
    try:
        return validate_kind(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_at_time(text: str) -> datetime:
    """An argparse type: an ISO 8601 time with its UTC offset."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2030-01-31T09:00:00+01:00)"
        ) from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"give the time with its UTC offset, e.g. {text}+00:00 or {text}Z"
        )
    return value


def add_operator_commands(commands: Any) -> None:
    """The subcommands that operate on a queue's table, each with --dsn, --table, --json."""
    common = argparse.ArgumentParser(add_help=False)
    options = common.add_argument_group("connection and output")
    options.add_argument("--dsn", help="the database to connect to (default: $PGQUEUE_DSN)")
    options.add_argument(
        "--table",
        type=table_name,
        help="the queue's table, name or schema.name "
        f"(default: $PGQUEUE_TABLE, else {DEFAULT_TABLE})",
    )
    options.add_argument(
        "--json", action="store_true", help="print one JSON document instead of aligned text"
    )

    def leaf(
        group: Any,
        name: str,
        run: Callable[[Queue, argparse.Namespace], int],
        help: str,
        description: str | None = None,
        prepare: Callable[[argparse.Namespace], None] | None = None,
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = group.add_parser(
            name, parents=[common], help=help, description=description or help
        )
        p.set_defaults(
            run=lambda args: run_on_queue(run, args, prepare), subparser=p, history=False
        )
        return p

    def kinds_option(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument(
            "--kind",
            dest="kinds",
            action="append",
            type=kind_name,
            metavar="KIND",
            help=f"only {what} of this kind (repeat for several)",
        )

    def limit_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--limit", type=positive_int, default=100, metavar="N", help="at most N (default 100)"
        )
        p.add_argument("--after", type=job_id, metavar="ID", help="start after this id (to page)")

    def nested(name: str, help: str) -> Any:
        p = commands.add_parser(name, help=help, description=help)
        p.set_defaults(subparser=p)
        return p.add_subparsers(dest="action", metavar="ACTION", required=True)

    leaf(
        commands,
        "migrate",
        cmd_migrate,
        "create the queue's table or upgrade its schema; print the version",
        "Apply the schema migrations the table lacks (idempotent; one installer at a time). "
        "A table built by hand with the seed design's columns is adopted in place.",
    )

    enqueue = leaf(commands, "enqueue", cmd_enqueue, "add one job", prepare=prepare_enqueue)
    enqueue.add_argument("kind", metavar="KIND", help="which handler runs the job")
    enqueue.add_argument(
        "payload",
        metavar="PAYLOAD_JSON",
        nargs="?",
        help="the handler's input as JSON (default: null); - reads it from stdin",
    )
    when = enqueue.add_mutually_exclusive_group()
    when.add_argument("--delay", type=parse_duration, metavar="DURATION", help="run it later")
    when.add_argument(
        "--run-at",
        type=run_at_time,
        metavar="ISO8601",
        help="not before this time, with its UTC offset (e.g. 2030-01-31T09:00:00Z)",
    )
    enqueue.add_argument(
        "--max-attempts", type=positive_int, default=3, metavar="N", help="attempts (default 3)"
    )

    stats = leaf(
        commands,
        "stats",
        cmd_stats,
        "counts by status and kind, the oldest wait, and running jobs past their lease",
    )
    stats.add_argument(
        "--visibility-timeout",
        type=positive_duration,
        default=DEFAULT_VISIBILITY_TIMEOUT,
        metavar="DURATION",
        help="the lease to judge running jobs by (default 5m, the workers' default)",
    )

    jobs = nested("jobs", "list and show jobs")
    jobs_list = leaf(jobs, "list", cmd_jobs_list, "list jobs in id order")
    jobs_list.add_argument(
        "--status", choices=[s.value for s in JobStatus], help="only jobs in this status"
    )
    kinds_option(jobs_list, "jobs")
    limit_option(jobs_list)
    show = leaf(jobs, "show", cmd_jobs_show, "show one job, with its payload and last error")
    show.add_argument("id", type=job_id, metavar="ID")

    dead = nested("dead", "list, retry and purge dead jobs")
    dead_list = leaf(dead, "list", cmd_dead_list, "list dead jobs in id order")
    kinds_option(dead_list, "dead jobs")
    limit_option(dead_list)
    retry = leaf(
        dead,
        "retry",
        cmd_dead_retry,
        "put dead jobs back to pending with a fresh set of attempts",
        "Put the dead jobs named (or, with --all, every dead job) back to pending, due now, "
        "with a fresh set of attempts. Exit 1 if an ID named is not a dead job; the dead "
        "ones named are retried all the same.",
        prepare=prepare_dead_retry,
    )
    retry.add_argument("ids", type=job_id, nargs="*", metavar="ID")
    retry.add_argument("--all", action="store_true", help="every dead job (of --kind, if given)")
    kinds_option(retry, "with --all, dead jobs")
    purge = leaf(
        dead,
        "purge",
        cmd_dead_purge,
        "delete dead jobs older than a DURATION",
        "Delete dead jobs whose last attempt became due more than DURATION ago (no column "
        "records when a job died; it died after that). --older-than 0 deletes every dead job.",
    )
    purge.add_argument(
        "--older-than",
        type=parse_duration,
        required=True,
        metavar="DURATION",
        help="dead jobs whose last attempt was due longer ago than this (0: every dead job)",
    )
    kinds_option(purge, "dead jobs")
    purge.add_argument(
        "--history",
        action="store_true",
        help="copy each purged job into <table>_history in the same statement, as a queue "
        "made with history=True does",
    )

    history = nested("history", "the audit trail of finished jobs (<table>_history)")
    prune = leaf(
        history,
        "prune",
        cmd_history_prune,
        "delete history rows older than a DURATION",
    )
    prune.add_argument(
        "--older-than",
        type=positive_duration,
        required=True,
        metavar="DURATION",
        help="rows of jobs that left the queue longer ago than this",
    )

    reap = leaf(
        commands,
        "reap",
        cmd_reap,
        "return running jobs whose lease ran out to pending",
        "Return running jobs whose lease is older than the visibility timeout to pending "
        "(those that used their last attempt become dead), as workers do every minute. "
        "Prints the ids returned to pending; none if another reaper is at work.",
    )
    reap.add_argument(
        "--visibility-timeout",
        type=positive_duration,
        default=DEFAULT_VISIBILITY_TIMEOUT,
        metavar="DURATION",
        help="the lease (default 5m, the workers' default)",
    )


def run_on_queue(
    command: Callable[[Queue, argparse.Namespace], int],
    args: argparse.Namespace,
    prepare: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Check the arguments (``prepare`` checks a command's own), connect, run `command`."""
    dsn = args.dsn or os.environ.get("PGQUEUE_DSN")
    if not dsn:
        raise UsageError("no database given: pass --dsn or set PGQUEUE_DSN")
    table = args.table or os.environ.get("PGQUEUE_TABLE") or DEFAULT_TABLE
    try:
        args.table = table_name(table)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"$PGQUEUE_TABLE: {exc}") from None
    if prepare is not None:
        prepare(args)
    check_connection(dsn)
    with Queue(dsn, table=args.table, max_connections=1, history=args.history) as queue:
        return command(queue, args)


def check_connection(dsn: str) -> None:
    """Connect once, so that an unreachable server is one clear line, at once."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise UsageError(f"the DSN is not a connection string: {one_line(exc)}") from None
    timeout: dict[str, Any] = {}
    if "connect_timeout" not in params and not os.environ.get("PGCONNECT_TIMEOUT"):
        timeout["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
    try:
        psycopg.connect(dsn, **timeout).close()
    except psycopg.Error as exc:
        raise OperationFailed(f"cannot connect to the database: {one_line(exc)}") from None


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """Print ``data`` as JSON with --json, else ``text``."""
    stream = sys.stdout
    if args.json:
        json.dump(data, stream, indent=2)
        stream.write("\n")
    elif text:
        stream.write(text if text.endswith("\n") else text + "\n")


# -- formatting ----------------------------------------------------------------


def format_duration(value: timedelta) -> str:
    """A duration the way the options take it: ``15m``, ``1h30m``, ``7d``; ``0.6s`` below 10s."""
    if value < timedelta(seconds=10):
        return f"{value.total_seconds():.1f}s".replace(".0s", "s")
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = zip((days, hours, minutes, secs), "dhms", strict=True)
    return "".join(f"{n}{unit}" for n, unit in units if n)


def format_time(value: datetime | None) -> str:
    """A time for people: local time zone, to the second, with its offset."""
    return "-" if value is None else value.astimezone().isoformat(sep=" ", timespec="seconds")


def table_text(
    headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[int] = (0,)
) -> str:
    """Rows aligned under ``headers``; the columns numbered in ``right`` are right-aligned."""
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def first_line(text: str | None, width: int = 60) -> str:
    """The first line of a text, cut to ``width``; ``-`` for none."""
    if not text:
        return "-"
    line = text.strip().splitlines()[0] if text.strip() else "-"
    return line if len(line) <= width else line[: width - 1] + "…"


def job_json(job: Job) -> dict[str, Any]:
    """A job as ``--json`` prints it: every column, times in ISO 8601."""

    def iso(value: datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "id": job.id,
        "kind": job.kind,
        "status": job.status.value,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_at": iso(job.run_at),
        "locked_by": job.locked_by,
        "locked_at": iso(job.locked_at),
        "last_error": job.last_error,
        "created_at": iso(job.created_at),
        "payload": job.payload,
    }


def jobs_text(jobs: list[Job], *, dead: bool = False) -> str:
    """Jobs as an aligned table (the columns of a dead job, with ``dead``)."""
    if not jobs:
        return "no dead jobs" if dead else "no jobs"
    rows: list[list[object]] = []
    for j in jobs:
        attempts = f"{j.attempts}/{j.max_attempts}"
        error = first_line(j.last_error)
        if dead:
            rows.append([j.id, j.kind, attempts, format_time(j.run_at), error])
        else:
            rows.append([j.id, j.kind, j.status.value, attempts, format_time(j.run_at),
                         j.locked_by or "-", error])  # fmt: skip
    if dead:
        headers = ["ID", "KIND", "ATTEMPTS", "LAST RUN DUE", "LAST ERROR"]
    else:
        headers = ["ID", "KIND", "STATUS", "ATTEMPTS", "RUN AT", "LOCKED BY", "LAST ERROR"]
    return table_text(headers, rows)


# -- the commands ------------------------------------------------------------------


def cmd_migrate(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue migrate``: install or upgrade the schema."""
    applied = queue.install()
    version = queue.schema_version()
    if applied:
        done = "applied " + ", ".join(str(v) for v in applied)
        text = f"{queue.table}: schema at version {version} ({done})"
    else:
        text = f"{queue.table}: schema at version {version}, up to date"
    emit(args, {"table": queue.table, "version": version, "applied": applied}, text)
    return 0


def prepare_enqueue(args: argparse.Namespace) -> None:
    """Read and check the job before connecting: bad input writes nothing."""
    text = sys.stdin.read() if args.payload == "-" else args.payload
    try:
        args.payload = None if text is None else json.loads(text)
    except ValueError as exc:
        raise UsageError(f"PAYLOAD_JSON is not valid JSON: {exc}") from None
    try:
        validate_spec(
            args.kind,
            args.payload,
            run_at=args.run_at,
            delay=args.delay,
            max_attempts=args.max_attempts,
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def cmd_enqueue(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue enqueue KIND [PAYLOAD_JSON]``."""
    new_id = queue.enqueue(
        args.kind,
        args.payload,
        run_at=args.run_at,
        delay=args.delay,
        max_attempts=args.max_attempts,
    )
    if args.run_at is not None:
        due = f", due at {format_time(args.run_at)}"
    elif args.delay:
        due = f", due in {format_duration(args.delay)}"
    else:
        due = ""
    data = {"id": new_id, "kind": args.kind, "table": queue.table}
    emit(args, data, f"enqueued job {new_id} ({args.kind}){due}")
    return 0


def cmd_stats(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue stats``."""
    stats = queue.stats(args.visibility_timeout)
    lease = args.visibility_timeout
    emit(args, stats_json(queue.table, stats, lease), stats_text(queue.table, stats, lease))
    return 0


def stats_json(table: str, stats: Stats, lease: timedelta) -> dict[str, Any]:
    """`Stats` as ``pgqueue stats --json`` prints them."""
    age = stats.oldest_pending_age
    return {
        "table": table,
        "total": stats.total,
        "by_status": {s.value: n for s, n in stats.by_status.items()},
        "by_kind": {k: {s.value: n for s, n in c.items()} for k, c in stats.by_kind.items()},
        "oldest_pending_age_seconds": None if age is None else age.total_seconds(),
        "expired": stats.expired,
        "visibility_timeout_seconds": lease.total_seconds(),
    }


def stats_text(table: str, stats: Stats, lease: timedelta) -> str:
    """`Stats` as aligned tables for people."""
    statuses = list(JobStatus)
    by_status: list[list[object]] = [[s.value, stats.by_status.get(s, 0)] for s in statuses]
    parts = [
        f"queue {table}",
        "",
        table_text(["STATUS", "JOBS"], [*by_status, ["total", stats.total]], right=[1]),
    ]
    if stats.by_kind:
        kinds: list[list[object]] = [
            [kind, *(counts.get(s, 0) for s in statuses)] for kind, counts in stats.by_kind.items()
        ]
        headers = ["KIND", *(s.value.upper() for s in statuses)]
        parts += ["", table_text(headers, kinds, right=range(1, len(headers)))]
    age = stats.oldest_pending_age
    parts += [
        "",
        f"oldest ready job waiting: {'-' if age is None else format_duration(age)}",
        f"running past their lease ({format_duration(lease)}): {stats.expired}",
    ]
    return "\n".join(parts)


def cmd_jobs_list(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue jobs list``."""
    jobs = queue.jobs(status=args.status, kinds=args.kinds, limit=args.limit, after_id=args.after)
    emit(args, [job_json(j) for j in jobs], jobs_text(jobs))
    return 0


def cmd_jobs_show(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue jobs show ID``: exit 1 if there is no such job."""
    job = queue.get(args.id)
    if job is None:
        raise OperationFailed(
            f"no job {args.id} in {queue.table} (a job that succeeded leaves no row)"
        )
    fields: list[tuple[str, object]] = [
        ("id", job.id),
        ("kind", job.kind),
        ("status", job.status.value),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("run at", format_time(job.run_at)),
        ("created at", format_time(job.created_at)),
        ("locked by", job.locked_by or "-"),
        ("locked at", format_time(job.locked_at)),
    ]
    width = max(len(name) for name, _ in fields)
    lines = [f"{name.ljust(width)}  {value}" for name, value in fields]
    lines += ["payload:", indent(json.dumps(job.payload, indent=2, ensure_ascii=False))]
    if job.last_error is not None:
        lines += ["last error:", indent(job.last_error)]
    emit(args, job_json(job), "\n".join(lines))
    return 0


def indent(text: str) -> str:
    """Every line of ``text`` indented by two spaces."""
    return "\n".join("  " + line for line in text.splitlines() or [""])


def cmd_dead_list(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue dead list``."""
    jobs = queue.jobs(status="dead", kinds=args.kinds, limit=args.limit, after_id=args.after)
    emit(args, [job_json(j) for j in jobs], jobs_text(jobs, dead=True))
    return 0


def prepare_dead_retry(args: argparse.Namespace) -> None:
    """IDs or ``--all``, and ``--kind`` only with ``--all``."""
    if args.all and args.ids:
        raise UsageError("give job IDs or --all, not both")
    if not args.all and not args.ids:
        raise UsageError("name the dead jobs to retry by ID, or give --all")
    if args.kinds and not args.all:
        raise UsageError("--kind goes with --all (IDs name their jobs already)")


def cmd_dead_retry(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue dead retry``: exit 1 if an ID named is not a dead job."""
    if args.all:
        count = queue.retry_dead(kinds=args.kinds)
        emit(args, {"retried": count}, f"retried {count} dead job{plural(count)}")
        return 0
    ids = list(dict.fromkeys(args.ids))
    # What each job was, to say why one is not retried; the retry itself
    # touches only the jobs that are dead when it runs.
    found = {i: queue.get(i) for i in ids}
    count = queue.retry(ids)
    refused = [
        {"id": i, "status": None if job is None else job.status.value}
        for i, job in found.items()
        if job is None or job.status is not JobStatus.DEAD
    ]
    summary = f"retried {count} dead job{plural(count)}"
    emit(args, {"retried": count, "not_dead": refused}, summary)
    if count == len(ids):
        return 0
    for r in refused:
        why = "no such job" if r["status"] is None else f"it is {r['status']}, not dead"
        print(f"{args.subparser.prog}: job {r['id']} not retried: {why}", file=sys.stderr)
    if not refused:  # it changed between the look and the retry
        stale = len(ids) - count
        print(f"{args.subparser.prog}: {stale} job(s) were no longer dead", file=sys.stderr)
    return 1


def plural(n: int) -> str:
    """``s`` unless ``n`` is 1."""
    return "" if n == 1 else "s"


def cmd_dead_purge(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue dead purge --older-than DURATION``."""
    count = queue.purge_dead(args.older_than, kinds=args.kinds)
    age = format_duration(args.older_than)
    emit(args, {"purged": count}, f"purged {count} dead job{plural(count)} older than {age}")
    return 0


def cmd_history_prune(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue history prune --older-than DURATION``."""
    count = queue.prune_history(args.older_than)
    age = format_duration(args.older_than)
    emit(args, {"pruned": count}, f"pruned {count} history row{plural(count)} older than {age}")
    return 0


def cmd_reap(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue reap``."""
    ids = queue.reap(args.visibility_timeout)
    lease = format_duration(args.visibility_timeout)
    if ids:
        text = f"returned {len(ids)} job{plural(len(ids))} past a {lease} lease to pending: " + (
            ", ".join(str(i) for i in ids)
        )
    else:
        text = f"no job returned to pending (none running past a {lease} lease)"
    lease_seconds = args.visibility_timeout.total_seconds()
    emit(args, {"reaped": ids, "visibility_timeout_seconds": lease_seconds}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
