"""``pgqueue history prune`` and ``pgqueue reap``: upkeep a cron job or an operator runs."""

from __future__ import annotations

import argparse
from typing import Any

from ..core.jobs import DEFAULT_VISIBILITY_TIMEOUT
from ..sync.queue import Queue
from .argtypes import positive_duration
from .operate import queue_command
from .output import emit, format_duration, plural
from .parsers import group


def add_commands(commands: Any) -> None:
    """``history prune`` and ``reap``."""
    history = group(commands, "history", "the audit trail of finished jobs (<table>_history)")
    prune = queue_command(
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

    reap = queue_command(
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
