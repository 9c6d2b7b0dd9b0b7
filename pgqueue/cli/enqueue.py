"""``pgqueue enqueue KIND [PAYLOAD_JSON]``: one job, with every option of a job."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..core.jobs import DEFAULT_QUEUE, ON_DUPLICATE, UNIQUE_SCOPES, DuplicateJob, JobSpec
from ..core.jsontext import load_json
from ..core.specs import validate_spec
from ..sync.queue import Queue
from .argtypes import (
    job_id,
    limit_key,
    parse_duration,
    positive_duration,
    positive_int,
    priority,
    queue_name,
    run_at_time,
)
from .errors import OperationFailed, UsageError
from .operate import queue_command
from .output import emit, format_duration, format_time

# A payload nested deeper than this is refused with a clear message (Python's
# own reader would fail on a thousand levels with a RecursionError).
MAX_DEPTH = 500


def add_commands(commands: Any) -> None:
    """``enqueue``."""
    enqueue = queue_command(
        commands, "enqueue", cmd_enqueue, "add one job", prepare=prepare_enqueue
    )
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
    _unique_options(enqueue)
    _control_options(enqueue)


def _unique_options(enqueue: argparse.ArgumentParser) -> None:
    """``--unique-key`` and what goes with it."""
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


def _control_options(enqueue: argparse.ArgumentParser) -> None:
    """``--result-ttl``, ``--limit-key`` and ``--depends-on``."""
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


def _job_options(args: argparse.Namespace) -> dict[str, Any]:
    """The job's options as ``enqueue`` and `validate_spec` take them."""
    return {
        "run_at": args.run_at,
        "delay": args.delay,
        "max_attempts": args.max_attempts,
        "queue": args.queue,
        "priority": args.priority,
        "unique_key": args.unique_key,
        "unique": args.unique,
        "unique_for": args.unique_for,
        "on_duplicate": args.on_duplicate,
        "result_ttl": args.result_ttl,
        "limit_key": args.limit_key,
        "depends_on": args.depends_on,
    }


def prepare_enqueue(args: argparse.Namespace) -> None:
    """Read and check the job before connecting: bad input writes nothing."""
    text = sys.stdin.read() if args.payload == "-" else args.payload
    try:
        args.payload = (
            None if text is None else load_json(text, "PAYLOAD_JSON", max_depth=MAX_DEPTH)
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.unique_key is None and (args.unique or args.on_duplicate):
        raise UsageError("--unique and --on-duplicate go with --unique-key")
    args.unique = args.unique or "queued"
    args.on_duplicate = args.on_duplicate or "return"
    try:
        validate_spec(JobSpec(args.kind, args.payload, **_job_options(args)))
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def cmd_enqueue(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue enqueue KIND [PAYLOAD_JSON]``: exit 1 for a duplicate with
    ``--on-duplicate raise``."""

    def enqueue(on_duplicate: str) -> int:
        options = {**_job_options(args), "on_duplicate": on_duplicate}
        try:
            return queue.enqueue(args.kind, args.payload, **options)
        except ValueError as exc:  # a dependency that never existed: nothing written
            raise UsageError(str(exc)) from None

    def done(job_id: int, text: str, *, duplicate: bool = False, replaced: bool = False) -> int:
        data = {
            "id": job_id,
            "kind": args.kind,
            "table": queue.table,
            "queue": args.queue,
            "priority": args.priority,
            "duplicate": duplicate,
            "replaced": replaced,
            "limit_key": args.limit_key,
            "depends_on": args.depends_on or [],
            "result_ttl_seconds": (
                None if args.result_ttl is None else args.result_ttl.total_seconds()
            ),
        }
        emit(args, data, text)
        return 0

    key = args.unique_key
    # "return" and "raise" write the same (nothing, for a duplicate): asking
    # with "raise" tells the command which happened, so that it can say so.
    try:
        new_id = enqueue("raise")
    except DuplicateJob as exc:
        held = exc.existing_id
        if args.on_duplicate == "raise":
            raise OperationFailed(f"{exc}; nothing enqueued") from None
        if args.on_duplicate == "return":
            text = f"job {held} holds unique key {key!r} already: nothing enqueued"
            return done(held, text, duplicate=True)
        # Replace the holder's payload and run_at; if it started meanwhile,
        # the key is free again and this is a new job.
        new_id = enqueue("replace")
        if new_id == held:
            text = f"job {held} holds unique key {key!r}: its payload and run_at replaced"
            return done(held, text, duplicate=True, replaced=True)
    if args.run_at is not None:
        due = f", due at {format_time(args.run_at)}"
    elif args.delay:
        due = f", due in {format_duration(args.delay)}"
    else:
        due = ""
    where = "" if args.queue == DEFAULT_QUEUE else f" in queue {args.queue}"
    if args.priority:
        where += f" at priority {args.priority}"
    if args.limit_key is not None:
        where += f" under limit {args.limit_key}"
    if args.result_ttl is not None:
        due += f", its result kept {format_duration(args.result_ttl)}"
    if args.depends_on:
        due += f", waiting for job {', '.join(map(str, args.depends_on))}"
    return done(new_id, f"enqueued job {new_id} ({args.kind}){where}{due}")
