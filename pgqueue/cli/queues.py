"""``pgqueue queues list|pause|resume``: the queues jobs wait in."""

from __future__ import annotations

import argparse
from typing import Any

from ..sync.queue import Queue
from .argtypes import queue_name
from .operate import queue_command
from .output import counts_text, emit, queue_json, queues_json, queues_text
from .parsers import group


def add_commands(commands: Any) -> None:
    """``queues list``, ``queues pause`` and ``queues resume``."""
    queues = group(commands, "queues", "list, pause and resume the queues jobs wait in")
    queue_command(
        queues,
        "list",
        cmd_queues_list,
        "list queues: paused or not, and their jobs by status",
        "List every queue that has jobs or was ever paused, with its jobs by status.",
    )
    pause = queue_command(
        queues,
        "pause",
        cmd_queues_pause,
        "pause a queue: workers claim none of its jobs until it is resumed",
        "Pause a queue: no worker claims its jobs until `pgqueue queues resume`. Jobs can "
        "still be enqueued to it, and its running jobs finish. The pause holds for every "
        "worker and across restarts; a queue with no jobs yet can be paused too. Prints the "
        "queue's jobs by status.",
    )
    resume = queue_command(
        queues,
        "resume",
        cmd_queues_resume,
        "resume a paused queue",
        "Resume a paused queue, and wake idle workers. Prints the queue's jobs by status.",
    )
    for command in (pause, resume):
        command.add_argument("name", type=queue_name, metavar="NAME", help="the queue's name")


def cmd_queues_list(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue queues list``."""
    states = queue.queues()
    emit(args, queues_json(states), queues_text(states))
    return 0


def cmd_queues_pause(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue queues pause NAME``."""
    queue.pause_queue(args.name)
    return report_queue(queue, args, "paused", ": no worker claims its jobs until it is resumed")


def cmd_queues_resume(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue queues resume NAME``."""
    queue.resume_queue(args.name)
    return report_queue(queue, args, "resumed")


def report_queue(queue: Queue, args: argparse.Namespace, what: str, then: str = "") -> int:
    """Print the queue just paused or resumed, with its jobs: a queue with
    none may be a typo, and the counts show it."""
    [state] = [s for s in queue.queues() if s.name == args.name]
    text = f"queue {state.name} {what} ({counts_text(state.counts)}){then}"
    emit(args, queue_json(state), text)
    return 0
