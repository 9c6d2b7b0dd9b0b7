"""``pgqueue cron``: list, pause, resume and trigger the schedules workers registered.

    pgqueue cron list
    pgqueue cron pause nightly_report      # its ticks enqueue nothing until resumed
    pgqueue cron resume nightly_report     # from its next tick; missed ones are not made up
    pgqueue cron trigger nightly_report    # one job now; not a tick

A schedule is defined in the workers' code (`pgqueue.Worker.schedule`) and
registered in ``<table>_schedules`` when a worker starts; these commands act
on that row. Exit 1 for a schedule no worker registered, and for a trigger
of a schedule with overlap=False whose previous job is still pending or
running (nothing is enqueued then).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..core.jobs import DuplicateJob
from ..core.schedules import ScheduleState, UnknownSchedule
from ..sync.queue import Queue
from .argtypes import schedule_name
from .errors import OperationFailed
from .operate import queue_command
from .output import emit, format_duration, format_time, record_json, table_text
from .parsers import group

__all__ = ["add_commands"]


def add_commands(commands: Any) -> None:
    """``cron list|pause|resume|trigger``."""
    cron = group(commands, "cron", "list, pause, resume and trigger schedules")
    # Alike but for NAME, which all but list take: (name, run, help, description).
    leaves = (
        ("list", cmd_cron_list,
         "list schedules: their definition, last and next tick, paused or not",
         "List every schedule a worker registered, by name: what it enqueues and when (cron "
         "in its time zone, or every DURATION), its last tick and the job of it, its next "
         "tick by the database's clock, and whether it is paused."),
        ("pause", cmd_cron_pause,
         "pause a schedule: its ticks enqueue nothing until it is resumed",
         "Pause a schedule: its ticks pass without a job until `pgqueue cron resume`. "
         "The pause holds for every worker and across restarts; jobs enqueued already "
         "stay."),
        ("resume", cmd_cron_resume,
         "resume a paused schedule from its next tick",
         "Resume a paused schedule. It goes on from its next tick: the ticks it missed "
         "while paused are not made up for."),
        ("trigger", cmd_cron_trigger,
         "enqueue a schedule's job now (not a tick)",
         "Enqueue the job a schedule's ticks enqueue, now, and print its id. The "
         "schedule's ticks go on as before. A schedule with overlap=False whose previous "
         "job is still pending or running gets no second one: exit 1."),
    )  # fmt: skip
    for name, run, help, description in leaves:
        p = queue_command(cron, name, run, help, description)
        if name != "list":
            p.add_argument("name", type=schedule_name, metavar="NAME", help="the schedule's name")


def cmd_cron_list(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue cron list``."""
    states = queue.schedules()
    rows: list[list[object]] = [
        [s.name, s.kind, when(s), format_time(s.next_tick), format_time(s.last_tick),
         s.last_job_id or "-", s.queue, s.priority, "yes" if s.overlap else "no",
         "yes" if s.paused else "no"]
        for s in states
    ]  # fmt: skip
    headers = ["NAME", "KIND", "SCHEDULE", "NEXT TICK", "LAST TICK", "LAST JOB", "QUEUE",
               "PRIORITY", "OVERLAP", "PAUSED"]  # fmt: skip
    text = table_text(headers, rows, right=[5, 7]) if rows else "no schedules"
    emit(args, [schedule_json(s) for s in states], text)
    return 0


def when(state: ScheduleState) -> str:
    """``cron 0 3 * * * (Europe/Berlin)`` or ``every 5m``."""
    if state.every is not None:
        return f"every {format_duration(state.every)}"
    return f"cron {(state.cron or '').strip()} ({state.tz})"


def schedule_json(state: ScheduleState) -> dict[str, Any]:
    """A schedule as ``cron list --json`` prints it; times in ISO 8601."""
    return record_json(
        state, "name", "kind", "cron", "every_seconds", "tz", "payload", "queue", "priority",
        "overlap", "paused", "last_tick", "last_job_id", "next_tick", "updated_at",
    )  # fmt: skip


def _set_paused(queue: Queue, args: argparse.Namespace, paused: bool) -> int:
    try:
        if paused:
            queue.pause_schedule(args.name)
        else:
            queue.resume_schedule(args.name)
    except UnknownSchedule as exc:
        raise OperationFailed(str(exc)) from None
    verb = "paused" if paused else "resumed"
    emit(args, {"name": args.name, "paused": paused}, f"schedule {args.name} {verb}")
    return 0


def cmd_cron_pause(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue cron pause NAME``."""
    return _set_paused(queue, args, True)


def cmd_cron_resume(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue cron resume NAME``."""
    return _set_paused(queue, args, False)


def cmd_cron_trigger(queue: Queue, args: argparse.Namespace) -> int:
    """``pgqueue cron trigger NAME``."""
    try:
        job_id = queue.trigger_schedule(args.name)
    except UnknownSchedule as exc:
        raise OperationFailed(str(exc)) from None
    except DuplicateJob as exc:
        raise OperationFailed(
            f"schedule {args.name}'s previous job {exc.existing_id} is still pending or "
            "running (overlap=False): nothing enqueued"
        ) from None
    data = {"id": job_id, "name": args.name, "table": queue.table}
    emit(args, data, f"enqueued job {job_id} from schedule {args.name}")
    return 0
