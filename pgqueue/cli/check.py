"""``pgqueue check TARGET``: will the jobs in the table run on this code? A deploy step.

TARGET names the queue (its tasks are the handlers) or the worker (its
handlers and the queue's tasks) as ``module:attribute``. The pending,
waiting and dead jobs are read in pages (`pgqueue.core.checking`) and each
whose kind has no handler, or whose payload no longer binds to its task's
signature, is reported, grouped by kind. Exit status 1 when there is any.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from ..aio.queue import AsyncQueue
from ..aio.worker import AsyncWorker
from ..core.checking import CheckReport, page
from ..sync.queue import Queue
from ..sync.worker import Worker
from .argtypes import positive_int
from .errors import UsageError
from .operate import check_connection
from .output import emit, first_line, table_text
from .parsers import leaf
from .worker import import_target

__all__ = ["add_commands", "run_check"]


def add_commands(commands: Any) -> None:
    """``check``."""
    parser = leaf(
        commands,
        "check",
        run_check,
        "report jobs in the table that this code cannot run (a deploy step)",
        "Read the pending, waiting and dead jobs of TARGET's table in pages (each "
        "under a statement timeout; no lock a writer waits for) and report each job "
        "whose kind has no handler, or whose payload no longer binds to its task's "
        "signature, grouped by kind. Exit status 1 when there is any.",
    )
    parser.add_argument(
        "target",
        metavar="TARGET",
        help="module:attribute naming a pgqueue.Queue or AsyncQueue (its tasks) or a "
        "pgqueue.Worker or AsyncWorker (its handlers), e.g. myapp.jobs:worker",
    )
    parser.add_argument(
        "--dsn",
        default=None,
        help="the database (default: $PGQUEUE_DSN, else the one TARGET's queue names)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--page-size", type=positive_int, default=1000, help="jobs read at once (default: 1000)"
    )
    parser.add_argument(
        "--statement-timeout",
        type=positive_int,
        default=5000,
        metavar="MS",
        help="the longest a page's read may take, in milliseconds (default: 5000)",
    )


def handlers_of(target: Any, spec: str) -> tuple[Queue | AsyncQueue, dict[str, Callable[..., Any]]]:
    """The queue TARGET names, and the handlers its jobs would run with."""
    if isinstance(target, (Queue, AsyncQueue)):
        return target, target.tasks.handlers()
    if isinstance(target, (Worker, AsyncWorker)):
        handlers = target.handlers
        return target.queue, {kind: h for kind in handlers.kinds() if (h := handlers.get(kind))}
    what = f"the class {target.__name__}" if isinstance(target, type) else type(target).__name__
    raise UsageError(f"{spec} is {what}, not a pgqueue queue or worker")


def run_check(args: argparse.Namespace) -> int:
    """``pgqueue check``: 0 when every job can run, 1 otherwise."""
    queue, handlers = handlers_of(import_target(args.target), args.target)
    dsn = args.dsn or os.environ.get("PGQUEUE_DSN") or queue.conninfo
    check_connection(dsn)
    report = CheckReport()
    with Queue(dsn, max_connections=1, **queue.core.options()) as reader:
        after = 0
        while True:
            jobs = reader._driver.run(
                page(reader.core, after, args.page_size, args.statement_timeout)
            )
            report.add(jobs, handlers)
            if len(jobs) < args.page_size:
                break
            after = jobs[-1].id
    emit(args, report.as_json(), report_text(report, queue.table))
    return 0 if report.ok else 1


def report_text(report: CheckReport, table: str) -> str:
    if report.ok:
        return f"{table}: {report.checked} jobs checked; every one can run on this code"
    rows = [
        (f.kind, f.problem, f.count, ", ".join(map(str, f.sample_ids)), first_line(f.detail, 70))
        for f in sorted(report.findings.values(), key=lambda f: (f.kind, f.problem))
    ]
    stale = sum(f.count for f in report.findings.values())
    head = f"{table}: {stale} of {report.checked} jobs checked cannot run on this code"
    table_rows = table_text(["KIND", "PROBLEM", "JOBS", "SAMPLE IDS", "DETAIL"], rows, right=[2])
    return f"{head}\n{table_rows}"
