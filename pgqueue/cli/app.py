"""The top of the ``pgqueue`` command: its parser, and how what a command
raises becomes a line on stderr and an exit status (see ``pgqueue.cli``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

import psycopg
import psycopg.errors
from psycopg_pool import PoolTimeout

from .. import __version__
from ..core.migrations import SchemaError
from .errors import OperationFailed, UsageError, one_line

__all__ = ["build_parser", "main"]

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


def build_parser(groups: Sequence[ModuleType]) -> argparse.ArgumentParser:
    """The whole command line: the commands of each group module, in order."""
    parser = argparse.ArgumentParser(
        prog="pgqueue",
        description="A durable job queue inside PostgreSQL.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pgqueue {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in groups:
        group.add_commands(commands)
    return parser


def main(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Run the command ``parser`` parses from ``argv``; return its exit status."""
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
