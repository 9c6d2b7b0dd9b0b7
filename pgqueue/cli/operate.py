"""What the operator subcommands share: --dsn, --table, --json and
--transaction-pooling (`queue_command`), the options that filter jobs, and
connecting to the queue a command acts on (`run_on_queue`)."""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ..sync.queue import Queue
from .argtypes import job_id, kind_name, positive_int, queue_name, table_name
from .errors import OperationFailed, UsageError, one_line
from .parsers import leaf

__all__ = [
    "check_connection",
    "kinds_option",
    "limit_option",
    "queue_command",
    "queues_option",
    "run_on_queue",
]

DEFAULT_TABLE = "pgqueue_jobs"
# A connection attempt that hears nothing gives up after this long, unless the
# DSN or PGCONNECT_TIMEOUT says otherwise: an operator waits, a script hangs.
CONNECT_TIMEOUT_SECONDS = 10

QueueCommand = Callable[[Queue, argparse.Namespace], int]
"""An operator command: what it does with the queue its options name; its exit status."""


def queue_command(
    commands: Any,
    name: str,
    command: QueueCommand,
    help: str,
    description: str | None = None,
    prepare: Callable[[argparse.Namespace], None] | None = None,
) -> argparse.ArgumentParser:
    """A `leaf` that runs ``command`` on the queue its options (`common_options`) name."""
    run = functools.partial(run_on_queue, command, prepare=prepare)
    return leaf(commands, name, run, help, description, parents=[common_options()], history=False)


@functools.cache
def common_options() -> argparse.ArgumentParser:
    """--dsn, --table, --json, --transaction-pooling: what every operator command takes."""
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
    options.add_argument(
        "--transaction-pooling",
        action="store_true",
        help="the DSN is PgBouncer in transaction mode: prepare no statement (docs/pgbouncer.md)",
    )
    return common


def _only(p: argparse.ArgumentParser, name: str, type: Callable[[str], str], help: str) -> None:
    """``--NAME``, repeated for several: the jobs of these only."""
    p.add_argument(
        f"--{name}",
        dest=f"{name}s",
        action="append",
        type=type,
        metavar=name.upper(),
        help=f"{help} (repeat for several)",
    )


def kinds_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--kind KIND``: only ``what`` of these kinds."""
    _only(p, "kind", kind_name, f"only {what} of this kind")


def queues_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--queue QUEUE``: only ``what`` in these queues."""
    _only(p, "queue", queue_name, f"only {what} in this queue")


def limit_option(p: argparse.ArgumentParser) -> None:
    """``--limit N`` and ``--after ID``: a page of a listing."""
    p.add_argument(
        "--limit", type=positive_int, default=100, metavar="N", help="at most N (default 100)"
    )
    p.add_argument("--after", type=job_id, metavar="ID", help="start after this id (to page)")


def run_on_queue(
    command: QueueCommand,
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
    with Queue(
        dsn,
        table=args.table,
        max_connections=1,
        history=args.history,
        transaction_pooling=args.transaction_pooling,
    ) as queue:
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
