"""What the operator subcommands print: aligned text for people, or JSON with ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from ..core.jobs import ROW_STATUSES, Job, JobStatus, Stats
from ..core.ops import QueueState


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """Print ``data`` as JSON with --json, else ``text``."""
    stream = sys.stdout
    if args.json:
        json.dump(data, stream, indent=2)
        stream.write("\n")
    elif text:
        stream.write(text if text.endswith("\n") else text + "\n")


def format_duration(value: timedelta) -> str:
    """A duration the way the options take it: ``15m``, ``1h30m``, ``7d``; ``0.6s`` below 10s."""
    if value < timedelta(seconds=10):
        return f"{value.total_seconds():.1f}s".replace(".0s", "s")
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = zip((days, hours, minutes, secs), "dhms", strict=True)
    return "".join(f"{n}{unit}" for n, unit in units if n)


def format_time(value: datetime | None) -> str:
    """A time for people: local time zone, to the second, with its offset."""
    return "-" if value is None else value.astimezone().isoformat(sep=" ", timespec="seconds")


def table_text(
    headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[int] = (0,)
) -> str:
    """Rows aligned under ``headers``; the columns numbered in ``right`` are right-aligned."""
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def iso(value: datetime | None) -> str | None:
    """A time as ``--json`` prints it: ISO 8601, with its offset."""
    return None if value is None else value.isoformat()


def first_line(text: str | None, width: int = 60) -> str:
    """The first line of a text, cut to ``width``; ``-`` for none."""
    if not text:
        return "-"
    line = text.strip().splitlines()[0] if text.strip() else "-"
    return line if len(line) <= width else line[: width - 1] + "…"


def record_json(record: object, *names: str) -> dict[str, Any]:
    """The attributes of ``record`` named, in that order, as ``--json`` prints
    them: an enum as its value, a time in ISO 8601; ``X_seconds`` is the
    duration ``X`` in seconds."""
    document: dict[str, Any] = {}
    for name in names:
        if name.endswith("_seconds"):
            duration: timedelta | None = getattr(record, name.removesuffix("_seconds"))
            document[name] = None if duration is None else duration.total_seconds()
            continue
        value = getattr(record, name)
        if isinstance(value, datetime):
            value = iso(value)
        elif isinstance(value, Enum):
            value = value.value
        document[name] = value
    return document


def job_json(job: Job) -> dict[str, Any]:
    """A job as ``--json`` prints it: every column, times in ISO 8601."""
    return record_json(
        job, "id", "kind", "status", "attempts", "max_attempts", "run_at", "locked_by",
        "locked_at", "last_error", "created_at", "queue", "priority", "unique_key", "limit_key",
        "result_ttl_seconds", "cancel_requested", "payload",
    )  # fmt: skip


def jobs_text(jobs: list[Job], *, dead: bool = False) -> str:
    """Jobs as an aligned table (the columns of a dead job, with ``dead``)."""
    if not jobs:
        return "no dead jobs" if dead else "no jobs"
    rows: list[list[object]] = []
    for j in jobs:
        attempts = f"{j.attempts}/{j.max_attempts}"
        error = first_line(j.last_error)
        if dead:
            rows.append([j.id, j.kind, j.queue, attempts, format_time(j.run_at), error])
        else:
            rows.append([j.id, j.kind, j.queue, j.priority, j.status.value, attempts,
                         format_time(j.run_at), j.locked_by or "-", error])  # fmt: skip
    if dead:
        headers = ["ID", "KIND", "QUEUE", "ATTEMPTS", "LAST RUN DUE", "LAST ERROR"]
        return table_text(headers, rows)
    headers = ["ID", "KIND", "QUEUE", "PRIORITY", "STATUS", "ATTEMPTS", "RUN AT", "LOCKED BY",
               "LAST ERROR"]  # fmt: skip
    return table_text(headers, rows, right=(0, 3))


def stats_json(table: str, stats: Stats, lease: timedelta) -> dict[str, Any]:
    """`Stats` as ``pgqueue stats --json`` prints them."""
    age = stats.oldest_pending_age
    return {
        "table": table,
        "total": stats.total,
        "by_status": {s.value: n for s, n in stats.by_status.items()},
        "by_kind": {k: {s.value: n for s, n in c.items()} for k, c in stats.by_kind.items()},
        "by_queue": {q: {s.value: n for s, n in c.items()} for q, c in stats.by_queue.items()},
        # JSON keys are text: "10", "-5"; highest priority first.
        "by_priority": {
            str(p): {s.value: n for s, n in c.items()} for p, c in stats.by_priority.items()
        },
        "oldest_pending_age_seconds": None if age is None else age.total_seconds(),
        "expired": stats.expired,
        "visibility_timeout_seconds": lease.total_seconds(),
        # The counts that are estimates (by_status) or lower bounds (by_kind,
        # by_queue, by_priority; expired): empty when every count is exact.
        "estimated": sorted(stats.estimated),
    }


def stats_text(table: str, stats: Stats, lease: timedelta) -> str:
    """`Stats` as aligned tables for people."""
    statuses = list(ROW_STATUSES)
    by_status: list[list[object]] = [
        [s.value, _about(stats.by_status.get(s, 0), s in stats.estimated)] for s in statuses
    ]
    parts = [
        f"queue {table}",
        "",
        table_text(
            ["STATUS", "JOBS"],
            [*by_status, ["total", _about(stats.total, not stats.exact)]],
            right=[1],
        ),
    ]
    breakdowns: tuple[tuple[str, Mapping[Any, Mapping[JobStatus, int]]], ...] = (
        ("KIND", stats.by_kind),
        ("QUEUE", stats.by_queue),
        ("PRIORITY", stats.by_priority),
    )
    for title, breakdown in breakdowns:
        if not breakdown:
            continue
        headers = [title, *(s.value.upper() for s in statuses)]
        rows = [[key, *(counts.get(s, 0) for s in statuses)] for key, counts in breakdown.items()]
        # Numbers to the right; a priority is a number too.
        right = range(0 if title == "PRIORITY" else 1, len(headers))
        parts += ["", table_text(headers, rows, right=right)]
    age = stats.oldest_pending_age
    parts += [
        "",
        f"oldest ready job waiting: {'-' if age is None else format_duration(age)}",
        f"running past their lease ({format_duration(lease)}):"
        f" {stats.expired}{'+' if 'expired' in stats.estimated else ''}",
    ]
    if not stats.exact:
        parts += [
            "",
            "a large table: counts marked ≈ are the planner's estimates, and the"
            " tables by kind, queue and priority hold lower bounds (counted up to a cap)",
        ]
    return "\n".join(parts)


def _about(n: int, estimated: bool) -> str | int:
    return f"≈ {n}" if estimated else n


def queues_json(states: Sequence[QueueState]) -> list[dict[str, Any]]:
    """Queues as ``pgqueue queues list --json`` prints them."""
    return [queue_json(q) for q in states]


def queue_json(state: QueueState) -> dict[str, Any]:
    """One queue: its name, whether it is paused, its jobs by status."""
    return {
        "name": state.name,
        "paused": state.paused,
        "by_status": {s.value: state.counts.get(s, 0) for s in ROW_STATUSES},
        # The statuses whose count is not exact (a large table): at least that many.
        "estimated": sorted(state.estimated),
    }


def queues_text(states: Sequence[QueueState]) -> str:
    """Queues as an aligned table, for people."""
    if not states:
        return "no queues (no jobs, and no queue ever paused)"
    statuses = list(ROW_STATUSES)
    rows: list[list[object]] = [
        [
            q.name,
            "yes" if q.paused else "no",
            *(f"{q.counts.get(s, 0)}{'+' if s in q.estimated else ''}" for s in statuses),
        ]
        for q in states
    ]
    headers = ["QUEUE", "PAUSED", *(s.value.upper() for s in statuses)]
    return table_text(headers, rows, right=range(2, len(headers)))


def counts_text(counts: Mapping[JobStatus, int]) -> str:
    """``2 pending, 1 running, 0 dead``, or ``no jobs``."""
    if not any(counts.values()):
        return "no jobs"
    return ", ".join(f"{counts.get(s, 0)} {s.value}" for s in ROW_STATUSES)


def indent(text: str) -> str:
    """Every line of ``text`` indented by two spaces."""
    return "\n".join("  " + line for line in text.splitlines() or [""])


def plural(n: int) -> str:
    """``s`` unless ``n`` is 1."""
    return "" if n == 1 else "s"
