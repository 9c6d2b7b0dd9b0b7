"""The operator subcommands: their arguments, and connecting to the queue they act on."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ..core.jobs import (
    DEFAULT_QUEUE,
    DEFAULT_VISIBILITY_TIMEOUT,
    ON_DUPLICATE,
    ROW_STATUSES,
    UNIQUE_SCOPES,
)
from ..sync.queue import Queue
from .argtypes import (
    job_id,
    kind_name,
    parse_duration,
    positive_duration,
    positive_int,
    priority,
    queue_name,
    role_name,
    run_at_time,
    table_name,
)
from .commands import (
    cmd_dead_list,
    cmd_dead_purge,
    cmd_dead_retry,
    cmd_enqueue,
    cmd_grant,
    cmd_history_prune,
    cmd_jobs_list,
    cmd_jobs_show,
    cmd_migrate,
    cmd_queues_list,
    cmd_queues_pause,
    cmd_queues_resume,
    cmd_reap,
    cmd_stats,
    prepare_dead_retry,
    prepare_enqueue,
)
from .control import add_control_commands, limit_key
from .cron import add_cron_commands
from .errors import OperationFailed, UsageError, one_line

DEFAULT_TABLE = "pgqueue_jobs"
# A connection attempt that hears nothing gives up after this long, unless the
# DSN or PGCONNECT_TIMEOUT says otherwise: an operator waits, a script hangs.
CONNECT_TIMEOUT_SECONDS = 10


def add_operator_commands(commands: Any) -> None:
    """The subcommands that operate on a queue's table, each with --dsn, --table, --json."""
    p = Parsers(commands, _common_options())
    _add_schema_commands(p)
    _add_enqueue_command(p)
    _add_stats_command(p)
    _add_jobs_commands(p)
    _add_dead_commands(p)
    _add_queues_commands(p)
    _add_history_and_reap_commands(p)
    add_cron_commands(p.nested("cron", "list, pause, resume and trigger schedules"), p.leaf)
    add_control_commands(commands, p.leaf)


@dataclass(frozen=True)
class Parsers:
    """Where the operator subcommands go: the top-level subparsers, and the
    options every leaf command takes (`_common_options`)."""

    commands: Any
    common: argparse.ArgumentParser

    def leaf(
        self,
        group: Any,
        name: str,
        run: Callable[[Queue, argparse.Namespace], int],
        help: str,
        description: str | None = None,
        prepare: Callable[[argparse.Namespace], None] | None = None,
    ) -> argparse.ArgumentParser:
        """A command that runs ``run`` on the queue its options name."""
        p: argparse.ArgumentParser = group.add_parser(
            name, parents=[self.common], help=help, description=description or help
        )
        p.set_defaults(
            run=lambda args: run_on_queue(run, args, prepare), subparser=p, history=False
        )
        return p

    def nested(self, name: str, help: str) -> Any:
        """A group of commands (``pgqueue jobs list``, ``pgqueue jobs show``)."""
        p = self.commands.add_parser(name, help=help, description=help)
        p.set_defaults(subparser=p)
        return p.add_subparsers(dest="action", metavar="ACTION", required=True)


def _common_options() -> argparse.ArgumentParser:
    """--dsn, --table, --json, --transaction-pooling: what every leaf takes."""
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


def kinds_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--kind",
        dest="kinds",
        action="append",
        type=kind_name,
        metavar="KIND",
        help=f"only {what} of this kind (repeat for several)",
    )


def queues_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--queue",
        dest="queues",
        action="append",
        type=queue_name,
        metavar="QUEUE",
        help=f"only {what} in this queue (repeat for several)",
    )


def limit_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--limit", type=positive_int, default=100, metavar="N", help="at most N (default 100)"
    )
    p.add_argument("--after", type=job_id, metavar="ID", help="start after this id (to page)")


def _add_schema_commands(p: Parsers) -> None:
    """``migrate`` and ``grant``."""
    migrate = p.leaf(
        p.commands,
        "migrate",
        cmd_migrate,
        "create the queue's table or upgrade its schema; print the version",
        "Apply the schema migrations the table lacks (idempotent; one installer at a time). "
        "They only expand the schema: what the previous release's workers still use stays, "
        "listed as contract pending, until --contract. A table built by hand with the seed "
        "design's columns is adopted in place.",
    )
    migrate.add_argument(
        "--contract",
        action="store_true",
        help="also drop what only older releases used: once every process runs this pgqueue",
    )

    grant = p.leaf(
        p.commands,
        "grant",
        cmd_grant,
        "grant a role what the application and its workers need on the queue",
        "Run as the queue's owner, after migrate: USAGE on the schema and the id sequence, "
        "SELECT, INSERT, UPDATE, DELETE on the queue's tables (SELECT, INSERT, DELETE on its "
        "history table, if any). With --read-only, USAGE and SELECT only (monitoring, a "
        "read-only dashboard). Prints the GRANT statements it ran.",
    )
    grant.add_argument(
        "role", type=role_name, metavar="ROLE", help="the login role (or group) to grant to"
    )
    grant.add_argument(
        "--read-only", action="store_true", help="SELECT only: for monitoring or a dashboard"
    )


def _add_enqueue_command(p: Parsers) -> None:
    """``enqueue``, with every option of a job."""
    enqueue = p.leaf(p.commands, "enqueue", cmd_enqueue, "add one job", prepare=prepare_enqueue)
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
    enqueue.add_argument(
        "--queue",
        type=queue_name,
        default=DEFAULT_QUEUE,
        metavar="QUEUE",
        help=f"the queue it waits in (default {DEFAULT_QUEUE})",
    )
    enqueue.add_argument(
        "--priority",
        type=priority,
        default=0,
        metavar="N",
        help="-100 to 100, larger runs first (default 0)",
    )
    unique = enqueue.add_argument_group("unique jobs")
    unique.add_argument(
        "--unique-key", metavar="KEY", help="at most one job with this key (see --unique)"
    )
    scope = unique.add_mutually_exclusive_group()
    scope.add_argument(
        "--unique",
        choices=UNIQUE_SCOPES,
        help="with --unique-key: queued, one not yet started (the default); active, one "
        "pending or running",
    )
    scope.add_argument(
        "--unique-for",
        type=positive_duration,
        metavar="DURATION",
        help="with --unique-key: one per key for this long after it was enqueued, even once "
        "it is done",
    )
    unique.add_argument(
        "--on-duplicate",
        choices=ON_DUPLICATE,
        help="with --unique-key, when the key is taken: print the job that holds it (return, "
        "the default), exit 1 (raise), or give that job this payload and run-at if it has "
        "not started (replace)",
    )

    control = enqueue.add_argument_group("results and limits")
    control.add_argument(
        "--result-ttl",
        type=positive_duration,
        metavar="DURATION",
        help="keep the job's outcome and its handler's return value this long after it "
        "ends, for `pgqueue result` and wait()",
    )
    control.add_argument(
        "--limit-key",
        type=limit_key,
        metavar="KEY",
        help="count the job against this key's limit of running jobs (`pgqueue limits set`; "
        "one at a time until set)",
    )
    control.add_argument(
        "--depends-on",
        type=job_id,
        action="append",
        metavar="ID",
        help="wait until this job has succeeded (repeat for several; see docs/workflows.md)",
    )


def _add_stats_command(p: Parsers) -> None:
    """``stats``."""
    stats = p.leaf(
        p.commands,
        "stats",
        cmd_stats,
        "counts by status, kind, queue and priority, the oldest wait, and running jobs past "
        "their lease",
    )
    stats.add_argument(
        "--visibility-timeout",
        type=positive_duration,
        default=DEFAULT_VISIBILITY_TIMEOUT,
        metavar="DURATION",
        help="the lease to judge running jobs by (default 5m, the workers' default)",
    )


def _add_jobs_commands(p: Parsers) -> None:
    """``jobs list`` and ``jobs show``."""
    jobs = p.nested("jobs", "list and show jobs")
    jobs_list = p.leaf(jobs, "list", cmd_jobs_list, "list jobs in id order")
    jobs_list.add_argument(
        "--status", choices=[s.value for s in ROW_STATUSES], help="only jobs in this status"
    )
    kinds_option(jobs_list, "jobs")
    queues_option(jobs_list, "jobs")
    limit_option(jobs_list)
    show = p.leaf(jobs, "show", cmd_jobs_show, "show one job, with its payload and last error")
    show.add_argument("id", type=job_id, metavar="ID")


def _add_dead_commands(p: Parsers) -> None:
    """``dead list``, ``dead retry`` and ``dead purge``."""
    dead = p.nested("dead", "list, retry and purge dead jobs")
    dead_list = p.leaf(dead, "list", cmd_dead_list, "list dead jobs in id order")
    kinds_option(dead_list, "dead jobs")
    queues_option(dead_list, "dead jobs")
    limit_option(dead_list)
    retry = p.leaf(
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
    purge = p.leaf(
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


def _add_queues_commands(p: Parsers) -> None:
    """``queues list``, ``queues pause`` and ``queues resume``."""
    queues = p.nested("queues", "list, pause and resume the queues jobs wait in")
    p.leaf(
        queues,
        "list",
        cmd_queues_list,
        "list queues: paused or not, and their jobs by status",
        "List every queue that has jobs or was ever paused, with its jobs by status.",
    )
    pause = p.leaf(
        queues,
        "pause",
        cmd_queues_pause,
        "pause a queue: workers claim none of its jobs until it is resumed",
        "Pause a queue: no worker claims its jobs until `pgqueue queues resume`. Jobs can "
        "still be enqueued to it, and its running jobs finish. The pause holds for every "
        "worker and across restarts; a queue with no jobs yet can be paused too. Prints the "
        "queue's jobs by status.",
    )
    resume = p.leaf(
        queues,
        "resume",
        cmd_queues_resume,
        "resume a paused queue",
        "Resume a paused queue, and wake idle workers. Prints the queue's jobs by status.",
    )
    for command in (pause, resume):
        command.add_argument("name", type=queue_name, metavar="NAME", help="the queue's name")


def _add_history_and_reap_commands(p: Parsers) -> None:
    """``history prune`` and ``reap``."""
    history = p.nested("history", "the audit trail of finished jobs (<table>_history)")
    prune = p.leaf(
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

    reap = p.leaf(
        p.commands,
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
