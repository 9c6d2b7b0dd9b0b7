"""The ``pgqueue`` command: run workers, and operate a queue from a shell.

    pgqueue migrate                                     # create or upgrade the schema
    pgqueue grant app_role                              # the runtime's grants (--read-only)
    pgqueue enqueue send_receipt '{"order_id": 42}' --delay 15m
    pgqueue stats                                       # counts, oldest wait, expired leases
    pgqueue jobs list --status running --kind send_receipt
    pgqueue jobs show 17
    pgqueue dead list
    pgqueue dead retry 17 18                            # or: --all [--kind K]
    pgqueue dead purge --older-than 30d
    pgqueue history prune --older-than 90d
    pgqueue queues list                                 # paused or not, jobs by status
    pgqueue queues pause mail                           # or: resume mail
    pgqueue cron list                                   # schedules: last and next tick
    pgqueue cron trigger nightly_report                 # or: pause NAME, resume NAME
    pgqueue cancel 17 18                                # removed, or (running) asked to stop
    pgqueue result 17                                   # its outcome, and value or error
    pgqueue limits                                      # or: limits set api 5
    pgqueue reap --visibility-timeout 10m
    pgqueue worker myapp.jobs:worker                    # until SIGINT or SIGTERM
    pgqueue worker myapp.jobs:async_worker --trio       # an AsyncWorker on trio
    pgqueue worker myapp.jobs:worker --processes 4      # four processes, one supervisor
    pgqueue check myapp.jobs:worker                     # jobs this code cannot run (deploys)
    pgqueue bench                                       # throughput, beside the seed design
    pgqueue dashboard                                   # the web dashboard, on 127.0.0.1:8787
    pgqueue embedded start                              # a local server; prints its DSN

Every operator subcommand (all but ``worker`` and ``bench``) takes ``--dsn``
(default ``$PGQUEUE_DSN``), ``--table`` (default ``$PGQUEUE_TABLE``, else
``pgqueue_jobs``) and ``--json`` (one JSON document on stdout instead of
aligned text), after the subcommand. A DURATION is ``90`` (seconds), ``90s``,
``15m``, ``12h``, ``7d`` or a combination in that order such as ``1h30m``.

``worker TARGET`` names a `pgqueue.Worker` or `pgqueue.AsyncWorker` as
``module:attribute`` (the attribute may be dotted); the current directory is
put on ``sys.path`` first, so a module of the project the command runs in can
be named. Its ``--dsn`` (default ``$PGQUEUE_DSN``) and a flag for each of the
worker's settings (``--concurrency``, ``--batch-size``, ``--kinds``, ``--queues``,
``--poll-interval``...) override the worker's own: the command then runs a copy
of the worker, with the same handlers and other settings, on a queue of the
same table.

Exit status:

* 0: done (also when there was nothing to do: no job to reap, retry or purge,
  and when the reader of the output stopped reading, as ``| head`` does);
  for ``worker``, the worker stopped (a first SIGINT or SIGTERM stops it
  gracefully; see `pgqueue.AsyncWorker`).
* 1: an operational failure, reported in one line on stderr: the database
  cannot be reached or refused a statement, its schema is newer than this
  pgqueue (`pgqueue.SchemaTooNew`) or the table is not a queue's, ``jobs
  show`` found no such job, ``dead retry ID...`` named a job that is not dead
  (the dead ones named are still retried), ``enqueue --on-duplicate raise``
  found its unique key taken, ``cron pause|resume|trigger`` named no schedule
  or ``cron trigger`` found an overlap=False schedule's job still pending or
  running, ``cancel ID...`` named a job not in the queue (the others are
  cancelled), ``result ID`` found neither the job nor a result kept, ``check``
  found jobs that the code cannot run, or the worker failed.
* 2: bad arguments (no DSN, a malformed DURATION, PAYLOAD or date, a target
  that cannot be loaded...): a usage message on stderr, nothing written.
* 130: interrupted by SIGINT before a clean stop.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

import psycopg
import psycopg.errors
from psycopg_pool import PoolTimeout

from .. import __version__
from .. import bench as pgqueue_bench
from ..core.migrations import SchemaError
from .argtypes import parse_duration
from .check import add_check_command
from .dashboard import add_dashboard_command
from .embedded import add_embedded_command
from .errors import OperationFailed, UsageError, one_line
from .flags import COMMAND_FLAGS, SETTING_FLAGS
from .flags import add_arguments as add_worker_flags
from .operate import add_operator_commands
from .worker import run_worker

__all__ = ["OperationFailed", "UsageError", "build_parser", "main", "parse_duration"]

EXIT_CODES = """\
exit status:
  0    done (also when there was nothing to do)
  1    operational failure: cannot connect, database error, schema newer than
       this pgqueue, `jobs show` found no such job, `dead retry ID` named a
       job that is not dead, `enqueue --on-duplicate raise` found its unique
       key taken, `cron` named no schedule, `cron trigger` found the
       schedule's job still active (overlap=False), `cancel ID` named a job
       not in the queue, `result ID` found no job and no result, `check`
       found jobs this code cannot run, or the worker failed
  2    bad arguments: usage message on stderr, nothing written
  130  interrupted

Operator commands take --dsn (default $PGQUEUE_DSN), --table (default
$PGQUEUE_TABLE, else pgqueue_jobs) and --json after the subcommand.
DURATION: 90 (seconds), 90s, 15m, 12h, 7d, or combined in that order: 1h30m.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pgqueue`` command; return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    command: Callable[[argparse.Namespace], int] = args.run
    try:
        status = command(args)
        sys.stdout.flush()  # here, so that a reader gone away is caught below
        return status
    except BrokenPipeError:
        # The reader of stdout stopped reading (`pgqueue jobs list | head -1`):
        # what the command did is done; say nothing more, and let no flush
        # at exit raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
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
    # Every flag that `flask pgqueue worker` and `manage.py pgqueue_worker` take too.
    add_worker_flags(worker, SETTING_FLAGS)
    worker.add_argument(
        "--trio", action="store_true", help="run an AsyncWorker on trio instead of asyncio"
    )
    add_worker_flags(worker, COMMAND_FLAGS)
    worker.set_defaults(run=run_worker, subparser=worker)

    bench = commands.add_parser(
        "bench",
        help="measure enqueue and drain throughput beside the seed design",
        description=pgqueue_bench.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pgqueue_bench.add_arguments(bench)
    bench.set_defaults(run=run_bench, subparser=bench)
    add_dashboard_command(commands)
    add_embedded_command(commands)
    add_check_command(commands)
    return parser


def run_bench(args: argparse.Namespace) -> int:
    """``pgqueue bench``."""
    if min(args.jobs, args.repeat, args.concurrency, args.batch_size) < 1:
        raise UsageError("--jobs, --repeat, --concurrency and --batch-size must be at least 1")
    return pgqueue_bench.run(args)
