"""``pgqueue stats`` and ``pgqueue jobs list|show``: what the queue holds."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..core.jobs import DEFAULT_VISIBILITY_TIMEOUT, ROW_STATUSES
from ..sync.queue import Queue
from .argtypes import job_id, positive_duration
from .errors import OperationFailed
from .operate import kinds_option, limit_option, queue_command, queues_option
from .output import (
    emit,
    format_duration,
    format_time,
    indent,
    job_json,
    jobs_text,
    stats_json,
    stats_text,
)
from .parsers import group


def add_commands(commands: Any) -> None:
    """``stats``, ``jobs list`` and ``jobs show``."""
    stats = queue_command(
        commands,
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

    jobs = group(commands, "jobs", "list and show jobs")
    jobs_list = queue_command(jobs, "list", cmd_jobs_list, "list jobs in id order")
    jobs_list.add_argument(
        "--status", choices=[s.value for s in ROW_STATUSES], help="only jobs in this status"
    )
    kinds_option(jobs_list, "jobs")
    queues_option(jobs_list, "jobs")
    limit_option(jobs_list)
    show = queue_command(
        jobs, "show", cmd_jobs_show, "show one job, with its payload and last error"
    )
    show.add_argument("id", type=job_id, metavar="ID")


def cmd_stats(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue stats``."""
    stats = queue.stats(args.visibility_timeout)
    lease = args.visibility_timeout
    emit(args, stats_json(queue.table, stats, lease), stats_text(queue.table, stats, lease))
    return 0


def cmd_jobs_list(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue jobs list``."""
    jobs = queue.jobs(status=args.status, kinds=args.kinds, limit=args.limit, after_id=args.after,
                      queues=args.queues)  # fmt: skip
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
        ("queue", job.queue),
        ("priority", job.priority),
        ("unique key", "-" if job.unique_key is None else job.unique_key),
        ("limit key", "-" if job.limit_key is None else job.limit_key),
        ("result ttl", "-" if job.result_ttl is None else format_duration(job.result_ttl)),
        ("status", job.status.value + (" (cancel requested)" if job.cancel_requested else "")),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("run at", format_time(job.run_at)),
        ("created at", format_time(job.created_at)),
        ("locked by", job.locked_by or "-"),
        ("locked at", format_time(job.locked_at)),
    ]
    if job.parents is not None:
        fields.append(("waits for", ", ".join(map(str, sorted(job.parents))) or "-"))
    width = max(len(name) for name, _ in fields)
    lines = [f"{name.ljust(width)}  {value}" for name, value in fields]
    lines += ["payload:", indent(json.dumps(job.payload, indent=2, ensure_ascii=False))]
    if job.last_error is not None:
        lines += ["last error:", indent(job.last_error)]
    emit(args, job_json(job), "\n".join(lines))
    return 0
