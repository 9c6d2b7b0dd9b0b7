"""``pgqueue dead list|retry|purge``: the jobs that used their last attempt."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..core.jobs import JobStatus
from ..sync.queue import Queue
from .argtypes import job_id, parse_duration
from .errors import UsageError
from .operate import kinds_option, limit_option, queue_command, queues_option
from .output import emit, format_duration, job_json, jobs_text, plural
from .parsers import group


def add_commands(commands: Any) -> None:
    """``dead list``, ``dead retry`` and ``dead purge``."""
    dead = group(commands, "dead", "list, retry and purge dead jobs")
    dead_list = queue_command(dead, "list", cmd_dead_list, "list dead jobs in id order")
    kinds_option(dead_list, "dead jobs")
    queues_option(dead_list, "dead jobs")
    limit_option(dead_list)
    retry = queue_command(
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
    purge = queue_command(
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


def cmd_dead_list(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue dead list``."""
    jobs = queue.jobs(status="dead", kinds=args.kinds, limit=args.limit, after_id=args.after,
                      queues=args.queues)  # fmt: skip
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
    # A dead unique job stays dead while another job holds its key.
    held = []
    if count < len(ids) - len(refused):
        for i, job in found.items():
            now = queue.get(i) if job is not None and job.unique_key is not None else None
            if now is not None and now.status is JobStatus.DEAD:
                held.append({"id": i, "unique_key": now.unique_key})
    summary = f"retried {count} dead job{plural(count)}"
    emit(args, {"retried": count, "not_dead": refused, "key_held": held}, summary)
    if count == len(ids):
        return 0
    for r in refused:
        why = "no such job" if r["status"] is None else f"it is {r['status']}, not dead"
        print(f"{args.subparser.prog}: job {r['id']} not retried: {why}", file=sys.stderr)
    for h in held:
        print(f"{args.subparser.prog}: job {h['id']} not retried: another job holds its "
              f"unique key {h['unique_key']!r}", file=sys.stderr)  # fmt: skip
    stale = len(ids) - count - len(refused) - len(held)
    if stale:  # it changed between the look and the retry
        print(f"{args.subparser.prog}: {stale} job(s) were no longer dead", file=sys.stderr)
    return 1


def cmd_dead_purge(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue dead purge --older-than DURATION``."""
    count = queue.purge_dead(args.older_than, kinds=args.kinds)
    age = format_duration(args.older_than)
    emit(args, {"purged": count}, f"purged {count} dead job{plural(count)} older than {age}")
    return 0
